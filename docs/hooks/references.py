"""The docs site's generated references: one source for what the code already knows (issue 32).

A MkDocs hook (mkdocs.yml `hooks:`): a page line `<!-- reference: NAME -->` becomes the Markdown that
`render(NAME)` returns, built at build time from
- `spec`: the pydantic models of the YAML spec (`mirror_worker.config.model`, the `airflow:` models of
  `mirror_airflow`): every key as users write it, its type, default and description;
- `cli`: the argparse parsers of the commands (`python -m mirror_worker` and its subcommands, the Spark jobs,
  the DAG stub renderer): every flag with its argument, default and help;
- `metrics`: the Prometheus registry a worker builds (`mirror_worker.metrics.MirrorMetrics`).

A field's description is its `Field(description=...)`, else the comment on or right above it in the model's
source, else the help of the worker flag that sets it: the docs never keep a second copy of either.
The renderers are plain functions of models, parsers and registries (tests/unit/test_docs_site.py).
"""

from __future__ import annotations

import argparse
import inspect
import os
import re
import sys
import tempfile
import types
import typing
from pathlib import Path

import annotated_types
from pydantic import BaseModel, SecretStr
from pydantic_core import PydanticUndefined

ROOT = Path(__file__).resolve().parents[2]
MARKER = re.compile(r"^<!-- reference: ([a-z-]+) -->$", re.MULTILINE)


# ------------------------------------------------------------------ the hook


def on_page_markdown(markdown: str, page=None, config=None, files=None) -> str:
    return MARKER.sub(lambda match: render(match.group(1)), markdown)


def render(name: str) -> str:
    _importable()
    renderers = {"spec": render_spec_reference, "cli": render_cli_reference, "metrics": render_metrics_reference}
    if name not in renderers:
        raise KeyError(f"unknown reference {name!r} (have: {', '.join(renderers)})")
    return renderers[name]()


def _importable() -> None:
    # The project's packages from this checkout (mirror_airflow lives under plugins/), as the tests import them.
    for path in (ROOT / "plugins", ROOT):
        if str(path) not in sys.path:
            sys.path.insert(0, str(path))
    # Importing Airflow (the lag and alert models) creates $AIRFLOW_HOME/logs: not in the user's home.
    os.environ.setdefault("AIRFLOW_HOME", str(Path(tempfile.gettempdir()) / "kafka-mirror-docs-airflow"))


# ------------------------------------------------------------------ spec


# Keys whose spec form differs from the model's field: the spec loader resolves the name into the forward mirror.
SPEC_TYPES = {"reverse-of": "string: a mirror's name"}


def spec_sections() -> list[tuple[str, str, type[BaseModel], set[str]]]:
    """(title, key prefix, model, fields not written under this prefix) of every spec mapping."""
    from mirror_airflow.lag.dag import LagSettings
    from mirror_airflow.notifications.alerts import AlertSettings
    from mirror_airflow.settings import MirrorAirflowSettings
    from mirror_worker.config.model import MirrorConfig, TopicCreation

    # Set through the group's `source`/`destination` mappings, not as mirror keys.
    structural = {"sources", "producer", "heartbeat_producer", "destination_schema_registry_url",
                  "destination_schema_registry"}
    return [
        ("Mirror keys (a mirror, or its group's `settings`)", "", MirrorConfig, structural),
        ("`topic-creation`", "topic-creation.", TopicCreation, set()),
        ("`airflow`", "airflow.", MirrorAirflowSettings, set()),
        ("`airflow.lag`", "airflow.lag.", LagSettings, set()),
        ("`airflow.alerts`", "airflow.alerts.", AlertSettings, set()),
    ]


def render_spec_reference() -> str:
    from mirror_worker.commands.cli import build_parser

    flags = worker_flags(build_parser())
    parts = []
    for title, prefix, model, skip in spec_sections():
        parts += [f"## {title}", "", render_model(model, prefix, skip, flags), ""]
    return "\n".join(parts)


def spec_key(model: type[BaseModel], name: str) -> str:
    """A field as the spec spells it: its alias (the kebab-case models), else kebab-case (the worker's model,
    whose spec loader maps `group-id` to `group_id`)."""
    field = model.model_fields[name]
    if field.alias:
        return field.alias
    generator = model.model_config.get("alias_generator")
    if callable(generator):
        return generator(name)
    return name.replace("_", "-")


def spec_keys(model: type[BaseModel], prefix: str = "", skip: set[str] = frozenset()) -> list[str]:
    return [prefix + spec_key(model, name) for name in model.model_fields if name not in skip]


def render_model(model: type[BaseModel], prefix: str = "", skip: set[str] = frozenset(),
                 flags: dict[str, str] | None = None) -> str:
    flags = flags or {}
    comments = field_comments(model)
    rows = ["| key | type | default | flag | description |", "|---|---|---|---|---|"]
    for name, field in model.model_fields.items():
        if name in skip:
            continue
        description = field.description or comments.get(name) or _flag_help(flags, name) or _model_doc(field.annotation)
        flag = flags.get(name, ("", ""))[0]
        rows.append("| " + " | ".join([
            f"`{prefix}{spec_key(model, name)}`",
            _cell(SPEC_TYPES.get(prefix + spec_key(model, name)) or type_text(field.annotation) + _bounds(field.metadata)),
            _cell(default_text(field)), f"`{flag}`" if flag else "", _cell(description or ""),
        ]) + " |")
    return "\n".join(rows)


def _model_doc(tp) -> str:
    """The docstring of the model a field holds (a nested mapping such as topic-creation)."""
    for candidate in (tp, *typing.get_args(tp)):
        if isinstance(candidate, type) and issubclass(candidate, BaseModel) and candidate.__doc__:
            return candidate.__doc__.strip().splitlines()[0]
    return ""


def worker_flags(parser: argparse.ArgumentParser) -> dict[str, tuple[str, str]]:
    """{dest: (flag, help)} of the worker's classic flags: most set the spec key of the same field."""
    return {a.dest: (a.option_strings[0], a.help or "") for a in parser._actions if a.option_strings and a.dest != "help"}


def _flag_help(flags: dict[str, tuple[str, str]], name: str) -> str:
    return flags.get(name, ("", ""))[1]


def field_comments(model: type[BaseModel]) -> dict[str, str]:
    """{field: the comment on its line, else the comment block right above it} in the class's source."""
    try:
        lines = inspect.getsource(model).splitlines()
    except (OSError, TypeError):
        return {}
    comments: dict[str, str] = {}
    block: list[str] = []
    for line in lines[1:]:
        stripped = line.strip()
        if stripped.startswith("#"):
            block.append(stripped.lstrip("#").strip())
            continue
        match = re.match(r"^    ([a-z_][a-z0-9_]*)\s*:", line)
        if match:
            inline = re.search(r"\)?\s+#\s*(.+)$", line)
            text = inline.group(1) if inline and line.count('"') % 2 == 0 else " ".join(block)
            if text:
                comments[match.group(1)] = text
        block = []
    return comments


def type_text(tp) -> str:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is typing.Annotated:
        return type_text(args[0])
    if origin is typing.Literal:
        return " or ".join(f"`{a}`" for a in args)
    if origin in (typing.Union, types.UnionType):
        present = [type_text(a) for a in args if a is not type(None)]
        return " or ".join(present) + (" or null" if len(present) < len(args) else "")
    if origin is dict:
        return "mapping"
    if origin is list:
        return f"list of {type_text(args[0])}s" if args else "list"
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return "mapping"
    names = {bool: "boolean", int: "integer", float: "number", str: "string", dict: "mapping", SecretStr: "string (secret)"}
    return names.get(tp, getattr(tp, "__name__", str(tp)))


def _bounds(metadata) -> str:
    signs = {annotated_types.Ge: ">=", annotated_types.Gt: ">", annotated_types.Le: "<=", annotated_types.Lt: "<"}
    bounds = []
    for item in metadata:
        for kind, sign in signs.items():
            if isinstance(item, kind):
                bounds.append(f"{sign} {getattr(item, kind.__name__.lower())}")
        if isinstance(item, annotated_types.MinLen):
            bounds.append(f"at least {item.min_length}")
    return f" ({', '.join(bounds)})" if bounds else ""


def default_text(field) -> str:
    if field.default_factory is not None:
        value = field.default_factory()
        return "see below" if isinstance(value, BaseModel) else f"`{value!r}`" if value else ("`{}`" if isinstance(value, dict) else "`[]`")
    if field.default is PydanticUndefined:
        return "required"
    if field.default is None:
        return "none"
    value = field.default
    return f"`{str(value).lower() if isinstance(value, bool) else value}`"


def _cell(text: str) -> str:
    # Paths of this checkout (defaults such as the DAGs folder) shown relative to the repository.
    return " ".join(str(text).replace(f"{ROOT}/", "").split()).replace("|", "\\|")


# ------------------------------------------------------------------ CLI


def cli_parsers() -> list[tuple[str, argparse.ArgumentParser]]:
    """(command, parser) of every command a user runs: the worker, its subcommands, the Spark jobs, the stubs."""
    from mirror_airflow.dag_factory import build_parser as dag_factory_parser
    from mirror_worker.commands.cli import build_parser as worker_parser
    from mirror_worker.commands.main import subcommand_parser
    from spark_jobs.catchup.job import build_parser as catchup_parser
    from spark_jobs.check.job import build_parser as check_parser

    parsers = [("python -m mirror_worker", worker_parser())]
    parsers += _subcommands(subcommand_parser()[0])
    parsers += [("python -m spark_jobs.catchup", catchup_parser()),
                ("python -m spark_jobs.consistency_check", check_parser())]
    parsers += _subcommands(dag_factory_parser())
    return parsers


def _subcommands(parser: argparse.ArgumentParser) -> list[tuple[str, argparse.ArgumentParser]]:
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            found += [(f"{parser.prog} {name}", sub) for name, sub in action.choices.items()]
    return found


def flag_rows(parser: argparse.ArgumentParser) -> list[tuple[str, str, str, str]]:
    """(flags, argument, default, help) of each option and positional of `parser`."""
    rows = []
    for action in parser._actions:
        if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
            continue
        names = ", ".join(action.option_strings) or action.dest
        if action.choices:
            argument = " or ".join(str(c) for c in action.choices)
        elif action.nargs == 0:
            argument = ""
        else:
            argument = action.metavar or action.dest.upper()
        if action.nargs == "?":
            argument = f"[{action.metavar or 'true or false'}]"
        default = "" if action.default in (None, False, [], argparse.SUPPRESS) else str(action.default)
        if action.required:
            default = "required"
        rows.append((names, argument, default, action.help or ""))
    return rows


def render_parser(command: str, parser: argparse.ArgumentParser) -> str:
    lines = [f"## `{command}`", ""]
    if parser.description:
        lines += [_cell(parser.description), ""]
    lines += ["| flag | argument | default | meaning |", "|---|---|---|---|"]
    for names, argument, default, help_text in flag_rows(parser):
        lines.append(f"| `{names}` | {_cell(argument) and '`' + _cell(argument) + '`'} | {_cell(default)} | {_cell(help_text)} |")
    return "\n".join(lines)


def render_cli_reference() -> str:
    return "\n\n".join(render_parser(command, parser) for command, parser in cli_parsers()) + "\n"


# ------------------------------------------------------------------ metrics


def metric_rows(registry_owner) -> list[tuple[str, str, str, tuple[str, ...]]]:
    """(exposed name, type, help, labels) of every metric of a MirrorMetrics."""
    from prometheus_client.metrics import MetricWrapperBase

    rows = []
    for collector in vars(registry_owner).values():
        if isinstance(collector, MetricWrapperBase):
            (family,) = collector.describe()
            name = family.name + ("_total" if family.type == "counter" else "")
            rows.append((name, family.type, family.documentation, tuple(collector._labelnames)))
    return sorted(rows)


def render_metrics_reference() -> str:
    from mirror_worker.metrics import MirrorMetrics

    lines = ["| metric | type | labels | meaning |", "|---|---|---|---|"]
    for name, kind, help_text, labels in metric_rows(MirrorMetrics("NAME")):
        lines.append(f"| `{name}` | {kind} | {', '.join(f'`{label}`' for label in labels)} | {_cell(help_text)} |")
    return "\n".join(lines) + "\n"
