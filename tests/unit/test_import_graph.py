"""The import graphs, read with ast: no cycle in mirror_worker nor in mirror_airflow, the worker's library never
imports the command layer, and the Airflow side (plugins/, dags/) imports the worker only through its public
surface, `mirror_worker.api`.

Imports inside functions count (a lazy import still couples two modules). Imports under `if TYPE_CHECKING:`
never run, but they couple two modules as much as any other: the cycle check counts them too; the
command-layer check reads only what runs.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE_DIR = Path(__file__).resolve().parents[2] / "mirror_worker"
COMMAND_LAYER = ("mirror_worker.__main__", "mirror_worker.commands")


def module_names(package_dir: Path) -> dict[str, Path]:
    names = {}
    for path in package_dir.rglob("*.py"):
        parts = list(path.relative_to(package_dir.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        names[".".join(parts)] = path
    return names


def _nodes(tree: ast.AST, type_only: bool):
    """Every node; the bodies of `if TYPE_CHECKING:` blocks only if `type_only`."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        for child in ast.iter_child_nodes(node):
            if not type_only and isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                stack.extend(child.orelse)
                continue
            stack.append(child)


def import_graph(package_dir: Path = PACKAGE_DIR, type_only: bool = True) -> dict[str, set[str]]:
    """{module: the package's modules it imports}, those under `if TYPE_CHECKING:` too if `type_only`."""
    modules = module_names(package_dir)
    graph = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        edges = set()
        for node in _nodes(ast.parse(path.read_text(), str(path)), type_only):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
                targets = [base] + [f"{base}.{alias.name}" for alias in node.names]
            else:
                continue
            edges |= {t for t in targets if t in modules and t != name}
        graph[name] = edges
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1 on the current path, 2 done

    def visit(node: str, path: list[str]) -> list[str] | None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [node, nxt] if nxt in path else path + [node, nxt]
            if nxt not in state:
                found = visit(nxt, path + [node])
                if found:
                    return found
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state:
            found = visit(start, [])
            if found:
                return found
    return None


def is_command_layer(module: str) -> bool:
    return any(module == c or module.startswith(c + ".") for c in COMMAND_LAYER)


def library_imports_of_command_layer(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    return {
        module: {t for t in targets if is_command_layer(t)}
        for module, targets in graph.items()
        if not is_command_layer(module) and any(is_command_layer(t) for t in targets)
    }


def test_find_cycle_sees_a_cycle_and_library_check_sees_a_command_import():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert find_cycle(graph) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None
    assert library_imports_of_command_layer({"mirror_worker.x": {"mirror_worker.commands.runner"}}) == {
        "mirror_worker.x": {"mirror_worker.commands.runner"}}


def test_the_graph_sees_lazy_and_package_imports():
    graph = import_graph()
    assert "mirror_worker.commands.runner" in graph["mirror_worker.commands.main"]  # imported inside a function
    assert "mirror_worker.commands.sync_schemas" in graph["mirror_worker.commands.main"]  # from package import module


def test_the_graph_sees_type_only_imports_unless_asked_not_to(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "a.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg import b\n")
    (tmp_path / "pkg" / "b.py").write_text("from pkg import a\n")
    assert find_cycle(import_graph(tmp_path / "pkg")) == ["pkg.a", "pkg.b", "pkg.a"]
    assert find_cycle(import_graph(tmp_path / "pkg", type_only=False)) is None


def test_no_import_cycle_in_mirror_worker_type_only_imports_included():
    assert find_cycle(import_graph()) is None


def test_library_modules_never_import_the_command_layer():
    assert library_imports_of_command_layer(import_graph(type_only=False)) == {}


def test_no_import_cycle_in_mirror_airflow_type_only_imports_included():
    assert find_cycle(import_graph(PACKAGE_DIR.parent / "plugins" / "mirror_airflow")) is None


# --- the Airflow side imports only the worker's public surface -------------------------------------------------
SURFACE = "mirror_worker.api"
AIRFLOW_SIDE = (PACKAGE_DIR.parent / "plugins", PACKAGE_DIR.parent / "dags")


def worker_imports(folders) -> dict[str, set[str]]:
    """{file: the mirror_worker modules it imports}, imports inside functions and type-only ones included."""
    found = {}
    for folder in folders:
        for path in sorted(folder.rglob("*.py")):
            targets = set()
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Import):
                    targets |= {alias.name for alias in node.names}
                elif isinstance(node, ast.ImportFrom) and not node.level and node.module == "mirror_worker":
                    targets |= {f"mirror_worker.{alias.name}" for alias in node.names}  # from package import module
                elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                    targets.add(node.module)
            targets = {t for t in targets if t == "mirror_worker" or t.startswith("mirror_worker.")}
            if targets:
                found[str(path.relative_to(folder.parent))] = targets
    return found


def outside_the_surface(imports: dict[str, set[str]]) -> dict[str, set[str]]:
    return {path: targets - {SURFACE} for path, targets in imports.items() if targets - {SURFACE}}


def test_the_surface_check_sees_internal_imports(tmp_path):
    (tmp_path / "side").mkdir()
    (tmp_path / "side" / "op.py").write_text(
        "from mirror_worker.api import ConfigError\nfrom mirror_worker import groups\n"
        "def f():\n    from mirror_worker.config.spec import read_spec\n")
    (tmp_path / "side" / "ok.py").write_text("from mirror_worker.api import read_spec\n")
    assert outside_the_surface(worker_imports([tmp_path / "side"])) == {
        "side/op.py": {"mirror_worker.groups", "mirror_worker.config.spec"}}


def test_the_airflow_side_imports_only_the_workers_public_surface():
    imports = worker_imports(AIRFLOW_SIDE)
    assert imports, "the Airflow side imports nothing of the worker: the check would see nothing"
    assert outside_the_surface(imports) == {}


def test_the_surface_names_what_it_loads_and_each_name_is_there():
    import importlib

    from mirror_worker import api

    tree = ast.parse((PACKAGE_DIR / "api.py").read_text())
    type_only = {(node.module, alias.name): alias.asname or alias.name
                 for block in tree.body if isinstance(block, ast.If) for node in block.body
                 for alias in node.names}
    assert {home: name for name, home in api._HOME.items()} == type_only  # noqa: SLF001 - the table itself
    for name, (module, attribute) in api._HOME.items():  # noqa: SLF001
        assert getattr(api, name) is getattr(importlib.import_module(module), attribute)
    with pytest.raises(AttributeError, match="no attribute 'worker'"):
        api.worker  # noqa: B018 - an internal name is not part of the surface
