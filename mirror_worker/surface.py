"""How a public surface module (`api`, `batch_api`) serves its names: each is loaded from its home module when
first asked for, never cached in the surface, so importing a surface costs nothing until a name is used (a DAG
file that needs the spec reader does not import the offset translation) and a test that patches a home module
is seen. A surface lists its names as {name: (home module, name there)}; a home name that is a submodule of the
home package (`("mirror_worker.schemas", "wire_format")`) is imported as such.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable


def resolve(home: str, attribute: str):
    module = importlib.import_module(home)
    try:
        return getattr(module, attribute)
    except AttributeError:
        return importlib.import_module(f"{home}.{attribute}")


def lazy_names(surface: str,
               homes: dict[str, tuple[str, str]]) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """`__getattr__` and `__dir__` for the surface module named `surface`, serving `homes`."""
    names = sorted(homes)

    def __getattr__(name: str):
        try:
            home, attribute = homes[name]
        except KeyError:
            raise AttributeError(f"module {surface!r} has no attribute {name!r}") from None
        return resolve(home, attribute)

    def __dir__() -> list[str]:
        return names

    return __getattr__, __dir__
