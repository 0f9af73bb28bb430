"""Where bootstrap outputs and runtime state live, relative to the repository root."""

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / ".cache"
KAFKA_LIBS = CACHE / "kafka" / "libs"
APICURIO_HOME = CACHE / "apicurio"
SPARK_JARS = CACHE / "spark" / "jars"
TOXIPROXY_SERVER = CACHE / "toxiproxy" / "bin" / "toxiproxy-server"


def default_stack_dir() -> Path:
    """The stack that `make stack-up` manages; DEVSTACK_ROOT moves it."""
    return Path(os.environ.get("DEVSTACK_ROOT", ROOT / ".stack")).resolve()
