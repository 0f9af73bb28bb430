"""The embedded local stack: real Kafka clusters and schema registries started from the project's own jars.

`python -m devstack up|down|status` drives it from the shell (the Makefile's stack-* targets);
`tests/conftest.py` drives the same code as pytest session fixtures.
"""

from devstack.errors import SetupMissingError, StackError, StartupTimeoutError
from devstack.stack import CLUSTERS, Stack

__all__ = ["CLUSTERS", "SetupMissingError", "Stack", "StackError", "StartupTimeoutError"]
