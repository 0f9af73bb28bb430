"""`make run` sets up as the user who runs it: the scripts its recipe runs (read from `make -n run`, then every
script those run or source) never call apt-get or sudo. The tools only the tests use come from `make test`'s own
setup, which may still install Debian packages."""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
SCRIPTS = ROOT / "scripts"
# A word that runs a package manager or raises privileges; a quoted message naming one ("Debian: apt-get install
# maven") is one token with spaces and is not a call.
PRIVILEGED = re.compile(r"(?<![\w-])(apt-get|apt|dpkg|sudo)(?![\w-])")
RUNNERS = {"bash", "sh", "source", "."}


def _words(text: str) -> list[str]:
    lexer = shlex.shlex(text, posix=True, punctuation_chars=";&|()<>")
    lexer.whitespace_split = True
    return list(lexer)


def _scripts_run_by(words: list[str]) -> list[Path]:
    """The repo's scripts named right after bash, sh, source or `.`."""
    found = []
    for runner, target in zip(words, words[1:]):
        if runner in RUNNERS and target.endswith(".sh") and (SCRIPTS / Path(target).name).is_file():
            found.append(SCRIPTS / Path(target).name)
    return found


def _reached_scripts(target: str) -> dict[Path, list[str]]:
    """Each script `make TARGET` runs, directly or through another script, with its words."""
    dry = subprocess.run(["make", "-n", "--no-print-directory", target], cwd=ROOT, capture_output=True, text=True,
                         timeout=60, check=True)
    pending = _scripts_run_by(_words(dry.stdout))
    reached: dict[Path, list[str]] = {}
    while pending:
        script = pending.pop()
        if script not in reached:
            reached[script] = _words(script.read_text())
            pending += _scripts_run_by(reached[script])
    return reached


def _privileged_words(words: list[str]) -> list[str]:
    return [word for word in words if not any(c.isspace() for c in word) and PRIVILEGED.search(word)]


def test_make_run_setup_calls_no_package_manager_nor_sudo():
    reached = _reached_scripts("run")
    assert SCRIPTS / "setup.sh" in reached, sorted(reached)
    calls = {script.name: found for script, words in reached.items() if (found := _privileged_words(words))}
    assert not calls, f"make run's setup calls apt-get or sudo: {calls}"


def test_make_test_still_installs_the_test_tools():
    reached = _reached_scripts("test")
    assert SCRIPTS / "setup.sh" in reached and any(_privileged_words(words) for words in reached.values()), \
        sorted(reached)


def test_the_check_sees_a_call_and_ignores_a_message():
    words = _words('die "Maven is missing (Debian: apt-get install maven)"\n'
                   '# apt-get in a comment\n'
                   'local sudo=(); "${sudo[@]}" apt-get update\n')
    assert _privileged_words(words) == ["sudo=", "${sudo[@]}", "apt-get"]


def test_make_run_installs_only_the_run_requirements():
    """The test packages need Python 3.11.5+ (pymdown-extensions 13); Debian 12's python3.11 is 3.11.2."""
    files = {after for words in _reached_scripts("run").values()
             for flag, after in zip(words, words[1:]) if flag in {"-r", "--requirement"}}
    assert files == {"requirements.txt"}, files
