"""Every one-line error the code can make has its family on docs/operations/troubleshooting.md, or is listed in
tests/unit/troubleshooting_allowed.txt with why not: a new message, or a changed one, fails here until it is
documented (and test_troubleshooting.py then runs it). The list cannot go stale either: an entry the code no
longer has, or that the page now documents, fails too."""

from __future__ import annotations

import textwrap
from pathlib import Path

from tests.unit.troubleshooting_sites import DYNAMIC, MIN_LITERAL, covers, documented_lines, literal_length, scan

ALLOWED = Path(__file__).with_name("troubleshooting_allowed.txt")
# Why a site is not on the page: its message is another's, passed on (documented where it is made, or not
# a message of its own); no command reaches it; or its family is still to be documented.
REASONS = ("pass-through", "unreachable", "pending")


def allowed() -> dict[str, str]:
    """Site key (file, template) -> the reason, from troubleshooting_allowed.txt (`reason<TAB>file<TAB>template`,
    `#` comments)."""
    entries = {}
    for number, text in enumerate(ALLOWED.read_text(encoding="utf-8").splitlines(), 1):
        if not text.strip() or text.startswith("#"):
            continue
        reason, path, template = text.split("\t")
        assert reason in REASONS, f"line {number}: reason {reason!r} is not one of {REASONS}"
        entries[f"{path}\t{template}"] = reason
    return entries


def undocumented(sites, lines) -> set[str]:
    return {site.key for site in sites if not any(covers(line, site.template) for line in lines)}


def test_every_error_the_code_makes_is_on_the_page_or_allowed():
    missing = undocumented(scan(), documented_lines()) - set(allowed())
    assert not missing, ("errors with no family on docs/operations/troubleshooting.md (document them, with a case "
                         "in test_troubleshooting.py):\n" + "\n".join(sorted(missing)))


def test_the_allowed_list_holds_only_undocumented_sites_still_in_the_code():
    sites = scan()
    stale = set(allowed()) - undocumented(sites, documented_lines())
    in_code = {site.key for site in sites}
    assert not stale, "\n".join(f"{key}: {'now documented' if key in in_code else 'no longer in the code'}"
                                for key in sorted(stale))


def passes_through(key: str) -> bool:
    """A site that writes no message of its own: none of its text is literal, or only a prefix or separators
    around another message (`catchup: failed: …`, `…: …`)."""
    return DYNAMIC in key or literal_length(key.split("\t")[1]) < MIN_LITERAL


def test_a_pass_through_is_a_message_the_site_does_not_write():
    wrongly = [key for key, reason in allowed().items() if (reason == "pass-through") != passes_through(key)]
    assert not wrongly, "pass-through is for sites that write no message of their own, and only for them:\n" + \
        "\n".join(wrongly)


def test_each_family_says_more_than_its_placeholders():
    assert [line for line in documented_lines() if literal_length(line) < MIN_LITERAL] == []


def test_the_scan_finds_a_new_message_and_the_page_does_not_cover_it(tmp_path):
    module = tmp_path / "mirror_worker" / "commands" / "new.py"
    module.parent.mkdir(parents=True)
    module.write_text(textwrap.dedent('''
        from mirror_worker.exceptions import ConfigError

        def run(args):
            if args.x:
                raise ConfigError(f"--x: {args.x} is a brand new problem")
            raise ValueError("not user-facing here")
    '''))
    sites = scan(("mirror_worker",), root=tmp_path)
    assert [(s.kind, s.template) for s in sites] == [("ConfigError", "--x: … is a brand new problem")]
    assert undocumented(sites, documented_lines()) == {"mirror_worker/commands/new.py\t--x: … is a brand new problem"}


def test_the_scan_sees_the_commands_known_lines():
    templates = {(site.path, site.template) for site in scan()}
    assert ("mirror_worker/commands/cli.py", "--producer.config is required") in templates
    assert ("spark_jobs/catchup/job.py", "catchup: failed: …") in templates
    assert ("mirror_worker/exceptions.py", "partition …[…] halted at offset …: …") in templates
