"""Where the code makes the one-line errors users read, found by an AST walk (no import): each `raise` of a
user-facing error class, each `fail(...)` and each `print(..., file=sys.stderr)`, with its message as a template
(`…` for each interpolated part). tests/unit/test_troubleshooting_sites.py checks them against
docs/operations/troubleshooting.md."""

from __future__ import annotations

import ast
import functools
import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "operations" / "troubleshooting.md"
PACKAGES = ("mirror_worker", "spark_jobs", "plugins/mirror_airflow", "devstack")

# The error classes whose message reaches a user, with every class derived from them in PACKAGES (found from
# the class definitions): the worker's and the control plane's (MirrorError, ConfigError), the Spark jobs' bad
# input and copy/read failures, the local stack's, and the Airflow exceptions a task fails with.
USER_FACING_ROOTS = {"MirrorError", "JobInputError", "KafkaConnectorMissing", "CopyFailed", "ReadFailed",
                     "JvmReaderMissing", "StackError", "AirflowFailException", "AirflowException",
                     "MeasurementError", "GroupSelectionError"}
# Plain built-in errors that are user-facing only in these places: the spec models' validators (pydantic turns
# their ValueError into the spec's one-line ConfigError), and the operators' RuntimeError (the task's failure).
USER_FACING_IN = {"ValueError": ("mirror_worker/config/", "plugins/mirror_airflow/settings.py"),
                  "RuntimeError": ("plugins/mirror_airflow/operators/", "plugins/mirror_airflow/notifications/")}
# Subclasses of the roots whose message never reaches a user as a line of its own: each is caught where it is
# called and turned into another outcome.
INTERNAL = {
    # exactly-once transaction outcomes, handled by engine/transaction_cycle.py (and the catch-up's
    # spark_jobs/catchup/eos.py): the partitions are re-sent from their committed positions or fenced anew
    "TransactionAborted": "its records are re-sent from the committed positions",
    "ProducerFenced": "the stream is fenced anew (another owner, or its producer replaced)",
    "TransactionPending": "the commit or abort is tried again within the shutdown's bound",
    # a clean stop (exit 0, logged), not an error
    "StoppedBeforeStart": "commands/runner.py logs it and exits 0",
    "StopInterrupted": "commands/runner.py logs it and exits 0 (a stop during an exactly-once wait on the destination)",
}
PREFIXES = ("mirror_worker", "catchup", "consistency_check", "devstack", "demo", "dag_factory")
DYNAMIC = "<dynamic>"


@dataclass(frozen=True)
class Site:
    path: str  # relative to ROOT
    line: int
    kind: str  # the raised class, `fail` or `print`
    template: str  # the message, `…` for each interpolated part; DYNAMIC + the expression when none is literal

    @property
    def key(self) -> str:
        """What names the site in tests/unit/troubleshooting_allowed.txt: its file and message, not its line."""
        return f"{self.path}\t{self.template}"


def template(node: ast.expr | None) -> str | None:
    """The literal text of a message with `…` for each interpolated part; None when no part is literal."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else "…" for v in node.values)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = template(node.left), template(node.right)
        if left is None and right is None:
            return None
        return (left or "…") + (right or "…")
    return None


def _class_bases(paths: list[Path]) -> dict[str, set[str]]:
    bases: dict[str, set[str]] = {}
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                bases.setdefault(node.name, set()).update(ast.unparse(b).split(".")[-1] for b in node.bases)
    return bases


def user_facing_classes(paths: list[Path]) -> set[str]:
    bases = _class_bases(paths)
    found = set(USER_FACING_ROOTS)
    while grown := {name for name, parents in bases.items() if parents & found} - found:
        found |= grown
    return found


def _site(path: str, node: ast.AST, kind: str, message: ast.expr | None) -> Site:
    text = template(message)
    if text is None:
        text = f"{DYNAMIC} {ast.unparse(message) if message is not None else ''}".rstrip()
    return Site(path, node.lineno, kind, text)


def _called(node: ast.Call) -> str:
    return node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", "")


@functools.cache
def scan(packages: tuple[str, ...] = PACKAGES, root: Path = ROOT) -> tuple[Site, ...]:
    paths = sorted(p for package in packages for p in (root / package).rglob("*.py"))
    # The classes as the project defines them, whatever part of it (or other tree) is scanned.
    classes = user_facing_classes(paths + sorted(p for package in PACKAGES for p in (ROOT / package).rglob("*.py")))
    sites = []
    for path in paths:
        relative = path.relative_to(root).as_posix()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef) and node.name in classes - set(INTERNAL):
                # a class that makes its own message: `super().__init__(f"...")` in its __init__
                sites += [_site(relative, call, node.name, call.args[0] if call.args else None)
                          for call in ast.walk(node) if isinstance(call, ast.Call)
                          and ast.unparse(call.func) == "super().__init__"]
            elif isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call):
                kind = _called(node.exc)
                wanted = kind in classes or relative.startswith(USER_FACING_IN.get(kind, ("\0",)))
                if wanted and kind not in INTERNAL:
                    sites.append(_site(relative, node, kind, node.exc.args[0] if node.exc.args else None))
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("fail", "print"):
                if node.func.id == "print" and not any(k.arg == "file" and "stderr" in ast.unparse(k.value)
                                                       for k in node.keywords):
                    continue
                sites.append(_site(relative, node, node.func.id, node.args[0] if node.args else None))
    return tuple(sites)


# -- the page's side ----------------------------------------------------------------------------------------

# A row's line in backquotes, or in double ones with a space inside (a line that holds a backquote itself).
_ROW = re.compile(r"^\| (?:`` (.+?) ``|`([^`]+)`) \| ([^|]+) \|", re.MULTILINE)
_PREFIX = re.compile(r"^(?:" + "|".join(PREFIXES) + r"): ")
_LEADING_CONTEXT = re.compile(r"^(?:…:? )*")
# A family's line says more than its placeholders: at least this many characters of text (a line such as
# `…: …` would stand for every template); the same for a template standing for a documented line.
MIN_LITERAL = 8


def documented_exit_codes() -> dict[str, str]:
    """The error lines of the page's tables (each row's first column, in backquotes) and their exit column."""
    text = PAGE.read_text(encoding="utf-8")
    rows = [(doubled or single, exit_code) for doubled, single, exit_code in _ROW.findall(text)]
    assert len(rows) == len(dict(rows)), "a line documented twice"
    return dict(rows)


def documented_lines() -> list[str]:
    return list(documented_exit_codes())


def pattern(line: str, end_only: bool = False) -> re.Pattern:
    """A documented line as a regex: `…` stands for any text. `end_only`: matching the end of a text."""
    return re.compile(("" if end_only else "^") + ".+".join(re.escape(part) for part in line.split("…")) + "$")


def core(line: str) -> str:
    """A line or template without its command's prefix and leading context (`…: ` a file, key or cluster)."""
    return _LEADING_CONTEXT.sub("", _PREFIX.sub("", line, count=1), count=1)


def literal_length(line: str) -> int:
    return len(core(line).replace("…", "").strip(" :"))


def covers(line: str, site_template: str) -> bool:
    """Whether a documented line stands for a site's template: the line's core matches the end of the
    template's (what comes before is context, a flag or key; the template's own `…` are text that `…` on
    the page matches), or the template, its `…` standing for any text, matches the line (where the page
    spells out context the code interpolates, e.g. `mirror …: ` for `…: `, or that a caller adds)."""
    line, site_template = _PREFIX.sub("", line, count=1), _PREFIX.sub("", site_template, count=1)
    if pattern(core(line), end_only=True).search(core(site_template)):
        return True
    return literal_length(site_template) >= MIN_LITERAL and any(
        pattern(template).match(line) for template in (site_template, f"…: {site_template}"))
