"""Find a Java runtime of at least a given feature version."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from functools import lru_cache
from pathlib import Path

from devstack.errors import SetupMissingError


@lru_cache(maxsize=None)
def java_version(java: str) -> int:
    out = subprocess.run([java, "-version"], capture_output=True, text=True, check=False).stderr
    match = re.search(r'version "(\d+)(?:\.(\d+))?', out)
    if not match:
        return 0
    major = int(match.group(1))
    return int(match.group(2)) if major == 1 and match.group(2) else major


def _candidates() -> list[str]:
    found = []
    if os.environ.get("JAVA_HOME"):
        found.append(str(Path(os.environ["JAVA_HOME"]) / "bin" / "java"))
    if shutil.which("java"):
        found.append(shutil.which("java"))
    jvm_dir = Path("/usr/lib/jvm")
    if jvm_dir.is_dir():
        found += [str(p / "bin" / "java") for p in sorted(jvm_dir.iterdir())]
    return [c for c in dict.fromkeys(found) if Path(c).is_file()]


def find_java(min_version: int) -> str:
    """The first java binary of at least `min_version` (JAVA_HOME, PATH, then /usr/lib/jvm/*)."""
    for candidate in _candidates():
        if java_version(candidate) >= min_version:
            return candidate
    raise SetupMissingError(
        f"no Java {min_version}+ runtime found (looked at JAVA_HOME, PATH and /usr/lib/jvm); "
        f"install OpenJDK {min_version} or newer"
    )
