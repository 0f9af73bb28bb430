"""docs/operations/troubleshooting.md against the code: every error line the page lists is printed by its command,
run here with the input the page names as the cause (no server: the clusters are 127.0.0.1:1), and every case
here is on the page. `…` on the page stands for any text."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "operations" / "troubleshooting.md"
NOWHERE = "127.0.0.1:1"
SPEC = f"""groups:
  - name: g
    source: {{name: east, kafka: {{bootstrap.servers: "{NOWHERE}"}}}}
    destination: {{kafka: {{bootstrap.servers: "{NOWHERE}"}}}}
    mirrors:
      - name: orders
        whitelist: "orders"
        startup-timeout-s: 2
"""
WORKER = [sys.executable, "-m", "mirror_worker"]
FLAGS = [*WORKER, "--consumer.config", "{dir}/c.properties", "--producer.config", "{dir}/p.properties"]

# documented line -> the command that prints it ({dir}: a folder holding c.properties, p.properties, spec.yaml,
# unknown.yaml)
CASES = {
    "mirror_worker: --consumer.config is required (one per source cluster)": [*WORKER, "--whitelist", "a"],
    "mirror_worker: unrecognized arguments: …": [*WORKER, "--bogus"],
    "mirror_worker: argument …: invalid int value: …": [*FLAGS, "--whitelist", "a", "--num.streams", "two"],
    "mirror_worker: config file not found: …": [*WORKER, "--consumer.config", "{dir}/none", "--producer.config",
                                                "{dir}/p.properties", "--whitelist", "a"],
    "mirror_worker: whitelist: invalid regex …": [*FLAGS, "--whitelist", "("],
    "mirror_worker: spec file not found: …": [*WORKER, "--config", "{dir}/none.yaml"],
    "mirror_worker: …: mirror '…': …: unknown key (did you mean …?)": [*WORKER, "--config", "{dir}/unknown.yaml"],
    "mirror_worker: …: no mirror named '…' (have: …)": [*WORKER, "--config", "{dir}/spec.yaml", "--mirror", "nope"],
    "mirror_worker: destination cluster unreachable within …s: …": [*WORKER, "--config", "{dir}/spec.yaml"],
    "mirror_worker: source '…' cluster unreachable within …s: …": [*WORKER, "--config", "{dir}/spec.yaml"],
    "consistency_check: the following arguments are required: …": [sys.executable, "-m",
                                                                    "spark_jobs.consistency_check", "--topics", "a"],
    "catchup: --source.bootstrap.servers is required (or --config mirrors.yaml --mirror NAME)": [
        sys.executable, "-m", "spark_jobs.catchup", "--topics", "a"],
}


def documented_lines() -> list[str]:
    return re.findall(r"^\| `([^`]+)` \|", PAGE.read_text(encoding="utf-8"), re.MULTILINE)


def pattern(line: str) -> re.Pattern:
    return re.compile("^" + ".+".join(re.escape(part) for part in line.split("…")) + "$")


def test_the_page_lists_exactly_the_cases_run_here():
    assert sorted(documented_lines()) == sorted(CASES)


@pytest.mark.parametrize("line", sorted(CASES))
def test_the_command_prints_the_documented_line_and_exits_2(line, tmp_path):
    (tmp_path / "c.properties").write_text(f"bootstrap.servers={NOWHERE}\ngroup.id=g\n")
    (tmp_path / "p.properties").write_text(f"bootstrap.servers={NOWHERE}\n")
    (tmp_path / "spec.yaml").write_text(SPEC)
    (tmp_path / "unknown.yaml").write_text(SPEC.replace("whitelist:", "prefx: x.\n        whitelist:"))
    argv = [arg.replace("{dir}", str(tmp_path)) for arg in CASES[line]]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=120)
    # The client's own JSON log lines may come first; the command's error lines are the plain ones.
    printed = [text for text in done.stderr.splitlines() if text and not text.startswith("{")]
    assert done.returncode == 2, done.stderr[-2000:]
    assert any(pattern(line).match(text) for text in printed), f"{line!r} not in:\n" + "\n".join(printed)
