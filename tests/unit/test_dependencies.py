"""The installed-version contract: what pyproject.toml lets pip install is what the suite ran against.

The suite runs against the pins of constraints.txt. A floor below the pin admits releases nothing has tried:
`confluent-kafka>=2.6` admitted 2.6 to 2.15, whose registry client differs (2.6 uses requests, not httpx) and
lacks the private module `schemas/registry.py` once imported, so every mirror with registries died at start.
So the client libraries whose API the code calls directly have the pin as their floor, and no module imports
a third-party package's private (underscore) module, whose presence no release promises.
"""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("mirror_worker", "spark_jobs", "plugins/mirror_airflow", "dags", "devstack", "bench")
FIRST_PARTY = {"mirror_worker", "spark_jobs", "mirror_airflow", "dags", "devstack", "bench", "tests"}
# The libraries the worker calls the API of directly (clients, admin, registry, serialization).
CALLED_DIRECTLY = ("confluent-kafka", "fastavro")


def _pins() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        if "==" in line and not line.lstrip().startswith("#"):
            name, version = line.split("==", 1)
            pins[_canonical(name)] = version.split(";")[0].strip()
    return pins


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower().strip()


def _floors() -> dict[str, str]:
    floors = {}
    for requirement in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]:
        match = re.fullmatch(r"([A-Za-z0-9_.-]+)(?:\[[^]]*])?>=([0-9][^,;]*)", requirement.strip())
        if match:
            floors[_canonical(match.group(1))] = match.group(2).strip()
    return floors


def floor_gaps(floors: dict[str, str], pins: dict[str, str], names) -> list[str]:
    """One line per library in `names` whose floor is not the version the suite pins."""
    return [f"{name}: floor {floors.get(name)}, tested {pins.get(name)}"
            for name in names if floors.get(name) is None or floors.get(name) != pins.get(name)]


def private_imports(source: str) -> list[str]:
    """Imports of a third-party package's private module (a dotted part starting with '_', dunders aside)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        names = [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else (
            [alias.name for alias in node.names] if isinstance(node, ast.Import) else [])
        for name in names:
            parts = name.split(".")
            if parts[0] in FIRST_PARTY or parts[0] == "__future__":
                continue
            if any(part.startswith("_") and not part.startswith("__") for part in parts):
                found.append(name)
    return found


def test_the_directly_called_libraries_have_the_tested_version_as_their_floor():
    assert floor_gaps(_floors(), _pins(), CALLED_DIRECTLY) == []


def test_the_floor_check_fails_on_an_untested_floor():
    assert floor_gaps({"confluent-kafka": "2.6"}, {"confluent-kafka": "2.16.0"}, ["confluent-kafka"]) == [
        "confluent-kafka: floor 2.6, tested 2.16.0"]


def test_no_module_imports_a_private_module_of_another_package():
    offenders = {}
    for folder in SOURCES:
        for path in sorted((ROOT / folder).rglob("*.py")):
            if found := private_imports(path.read_text()):
                offenders[str(path.relative_to(ROOT))] = found
    assert offenders == {}


def test_the_private_import_check_sees_one():
    assert private_imports(
        "from confluent_kafka.schema_registry.common._httpx_compat import httpx\n"
        "import confluent_kafka.schema_registry\nfrom . import _local\nimport mirror_worker._x\n"
    ) == ["confluent_kafka.schema_registry.common._httpx_compat"]
