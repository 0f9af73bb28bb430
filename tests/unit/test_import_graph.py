"""The import graphs, read with ast: the worker's packages form layers and none imports a higher one; the
planes form layers too (the worker, the Spark jobs, the Airflow provider, the DAGs; the local stack, the
benchmarks); no cycle anywhere; and each plane reaches another only through that plane's documented surface
(`mirror_worker.api`, `mirror_worker.batch_api`, `spark_jobs.api`).

Imports inside functions count (a lazy import still couples two modules). Imports under `if TYPE_CHECKING:`
never run, but they couple two modules as much as any other: the layer and cycle checks count them too; the
command-layer check reads only what runs.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE_DIR = ROOT / "mirror_worker"
COMMAND_LAYER = ("mirror_worker.__main__", "mirror_worker.commands")

# The worker's layers, bottom first (docs/development/layout.md draws them): a module imports its own layer and
# the layers below it, never one above. Each entry names packages or modules; a package takes its submodules.
WORKER_LAYERS = [
    ("foundation", ["mirror_worker", "mirror_worker.exceptions", "mirror_worker.redaction", "mirror_worker.metrics",
                    "mirror_worker.logs", "mirror_worker.surface"]),
    ("policy", ["mirror_worker.policy"]),
    ("config", ["mirror_worker.config"]),
    ("clients", ["mirror_worker.clients"]),
    ("topics", ["mirror_worker.topics"]),
    ("schemas", ["mirror_worker.schemas"]),
    ("exactly_once", ["mirror_worker.exactly_once"]),
    ("dr", ["mirror_worker.dr"]),
    ("engine", ["mirror_worker.engine"]),
    ("surfaces", ["mirror_worker.api", "mirror_worker.batch_api"]),
    ("commands", ["mirror_worker.commands", "mirror_worker.__main__"]),
]


def module_names(package_dir: Path) -> dict[str, Path]:
    """{dotted name: file} of a package folder, or of a folder of top-level modules (dags/)."""
    names = {}
    base = package_dir.parent if (package_dir / "__init__.py").exists() else package_dir
    for path in package_dir.rglob("*.py"):
        parts = list(path.relative_to(base).with_suffix("").parts)
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


def import_graph(package_dir: Path | list[Path] = PACKAGE_DIR, type_only: bool = True) -> dict[str, set[str]]:
    """{module: the package's (packages') modules it imports}, those under `if TYPE_CHECKING:` too if `type_only`."""
    modules = {}
    for folder in package_dir if isinstance(package_dir, list) else [package_dir]:
        modules.update(module_names(folder))
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
                # `from pkg import module` depends on that module (and on pkg only for names pkg defines)
                targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                           for alias in node.names]
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


# --- layers: the worker's packages, and the planes ----------------------------------------------------------
# The planes, bottom first: the worker; the Spark jobs (which run the worker's code); the Airflow provider (which
# submits the jobs and supervises workers); the DAG files and the provider's plugin module; the local stack; the
# benchmarks. docs/hooks (the docs site's generator) reads whatever it documents and is no plane.
PLANE_FOLDERS = [ROOT / "mirror_worker", ROOT / "spark_jobs", ROOT / "plugins", ROOT / "dags", ROOT / "devstack",
                 ROOT / "bench"]
PLANE_LAYERS = [
    ("worker", ["mirror_worker"]),
    ("batch", ["spark_jobs"]),
    ("airflow provider", ["mirror_airflow"]),
    ("dags", ["mirror_dashboard_plugin", *(path.stem for path in (ROOT / "dags").glob("*.py"))]),
    ("local stack", ["devstack"]),
    ("benchmarks", ["bench"]),
]


def layer_of(module: str, layers) -> int | None:
    for index, (_, members) in enumerate(layers):
        if any(module == m or module.startswith(m + ".") for m in members):
            return index
    return None


def unlayered(graph: dict[str, set[str]], layers) -> list[str]:
    return sorted(m for m in graph if layer_of(m, layers) is None)


def upward_imports(graph: dict[str, set[str]], layers) -> list[str]:
    """Each import of a module from a higher layer, as `module (layer) -> target (layer)`."""
    found = []
    for module, targets in sorted(graph.items()):
        own = layer_of(module, layers)
        for target in sorted(targets):
            theirs = layer_of(target, layers)
            if own is not None and theirs is not None and theirs > own:
                found.append(f"{module} ({layers[own][0]}) -> {target} ({layers[theirs][0]})")
    return found


def test_the_layer_check_sees_an_import_from_a_higher_layer(tmp_path):
    layers = [("low", ["pkg.low"]), ("high", ["pkg.high"])]
    (tmp_path / "pkg" / "low").mkdir(parents=True)
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "low" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "low" / "a.py").write_text("def f():\n    from pkg.high import b\n")  # lazy, still counted
    (tmp_path / "pkg" / "high.py").write_text("from pkg.low import a\n")
    graph = import_graph(tmp_path / "pkg")
    assert upward_imports(graph, layers) == ["pkg.low.a (low) -> pkg.high (high)"]
    assert unlayered(graph, layers) == ["pkg"]


def test_every_worker_module_has_a_layer_and_none_imports_a_higher_one():
    graph = import_graph()
    assert unlayered(graph, WORKER_LAYERS) == []
    assert upward_imports(graph, WORKER_LAYERS) == []


def test_the_planes_form_layers_without_a_cycle():
    graph = import_graph(PLANE_FOLDERS)
    assert unlayered(graph, PLANE_LAYERS) == []
    assert upward_imports(graph, PLANE_LAYERS) == []
    assert find_cycle(graph) is None


# --- one surface per plane ---------------------------------------------------------------------------------
# {importing folder: the modules of the worker it may import}. The Airflow side and the local stack call what an
# operator calls; the Spark jobs and the benchmarks run pieces of the copy itself (batch_api), and may use both.
SURFACE = "mirror_worker.api"
BATCH_SURFACE = "mirror_worker.batch_api"
WORKER_SURFACES = {
    ROOT / "plugins": {SURFACE}, ROOT / "dags": {SURFACE}, ROOT / "devstack": {SURFACE},
    ROOT / "spark_jobs": {SURFACE, BATCH_SURFACE}, ROOT / "bench": {SURFACE, BATCH_SURFACE},
}


def plane_imports(folders, package: str = "mirror_worker") -> dict[str, set[str]]:
    """{file: the `package` modules it imports}, imports inside functions and type-only ones included."""
    found = {}
    for folder in folders:
        for path in sorted(folder.rglob("*.py")):
            targets = set()
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Import):
                    targets |= {alias.name for alias in node.names}
                elif isinstance(node, ast.ImportFrom) and not node.level and node.module == package:
                    targets |= {f"{package}.{alias.name}" for alias in node.names}  # from package import module
                elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                    targets.add(node.module)
            targets = {t for t in targets if t == package or t.startswith(package + ".")}
            if targets:
                found[str(path.relative_to(folder.parent))] = targets
    return found


def outside_the_surface(imports: dict[str, set[str]], allowed: set[str] = frozenset({SURFACE})) -> dict[str, set[str]]:
    return {path: targets - allowed for path, targets in imports.items() if targets - allowed}


@pytest.mark.parametrize("surface", ["api", "batch_api"])
def test_the_surface_names_what_it_loads_and_each_name_is_there(surface):
    import importlib

    from mirror_worker.surface import resolve

    module = importlib.import_module(f"mirror_worker.{surface}")
    tree = ast.parse((PACKAGE_DIR / f"{surface}.py").read_text())
    type_only = {(node.module, alias.name): alias.asname or alias.name
                 for block in tree.body if isinstance(block, ast.If) for node in block.body
                 for alias in node.names}
    assert {home: name for name, home in module._HOME.items()} == type_only  # noqa: SLF001 - the table itself
    for name, (home, attribute) in module._HOME.items():  # noqa: SLF001
        assert getattr(module, name) is resolve(home, attribute)
        assert f"`{name}`" in module.__doc__, f"{surface}'s docstring does not name {name}"
    with pytest.raises(AttributeError, match="no attribute 'worker'"):
        module.worker  # noqa: B018 - an internal name is not part of the surface


# --- the batch plane's surface ------------------------------------------------------------------------------
# The other planes reach the Spark jobs only through `spark_jobs.api` (the operators name the job modules by string,
# which is no import). docs/hooks (it documents the jobs' parsers) and tests/ are no plane.
SPARK_SURFACE = "spark_jobs.api"
SPARK_SURFACE_USERS = [ROOT / "plugins", ROOT / "dags", ROOT / "devstack", ROOT / "bench"]


@pytest.mark.parametrize("package, surface, outside, inside, expected", [
    ("mirror_worker", SURFACE,
     "from mirror_worker.api import ConfigError\nfrom mirror_worker import groups\n"
     "def f():\n    from mirror_worker.config.spec import read_spec\n",
     "from mirror_worker.api import read_spec\n",
     {"mirror_worker.groups", "mirror_worker.config.spec"}),
    ("spark_jobs", SPARK_SURFACE,
     "from spark_jobs.api import project_zip\nfrom spark_jobs import common\n"
     "def f():\n    from spark_jobs.catchup.copy_range import copy_task\n    import spark_jobs.check.job\n",
     "from spark_jobs.api import kafka_connector\nimport spark_jobs.api\n",
     {"spark_jobs.common", "spark_jobs.catchup.copy_range", "spark_jobs.check.job"}),
])
def test_the_surface_check_sees_internal_imports(tmp_path, package, surface, outside, inside, expected):
    (tmp_path / "side").mkdir()
    (tmp_path / "side" / "op.py").write_text(outside)
    (tmp_path / "side" / "ok.py").write_text(inside)
    assert outside_the_surface(plane_imports([tmp_path / "side"], package), {surface}) == {"side/op.py": expected}


# (package, importing folder, the package's modules that folder may import, whether it must import some: a
# folder that imports nothing would pass the check without being seen).
PLANE_SURFACES = [
    *(("mirror_worker", folder, allowed, folder.name != "dags") for folder, allowed in WORKER_SURFACES.items()),
    *(("spark_jobs", folder, {SPARK_SURFACE}, folder.name in ("plugins", "bench")) for folder in SPARK_SURFACE_USERS),
]


# White-box benchmarks, by file: what each may import beyond its folder's surfaces, and why. bench/hot_path_cost.py
# times the worker's hot path in-process, assembled as the worker (and its unit tests) assemble it, which no surface
# offers: no caller but a benchmark needs it.
WHITE_BOX = {
    "bench/hot_path_cost.py": {"mirror_worker.config.model", "mirror_worker.engine.source_stream",
                               "mirror_worker.engine.worker"},
}


@pytest.mark.parametrize("package, folder, allowed, imports_some", PLANE_SURFACES,
                         ids=lambda value: value.name if isinstance(value, Path) else None)
def test_each_plane_imports_another_only_through_its_surface(package, folder, allowed, imports_some):
    imports = {path: targets - WHITE_BOX.get(path, set()) for path, targets in plane_imports([folder], package).items()}
    if imports_some:
        assert imports, f"{folder.name}/ imports nothing of {package}: the check would see nothing"
    assert outside_the_surface(imports, allowed) == {}


def test_the_spark_surface_names_each_name_it_serves_and_imports_no_pyspark():
    import subprocess
    import sys

    import spark_jobs.api as api

    for name in api.__all__:
        assert getattr(api, name) is not None
        assert f"`{name}`" in api.__doc__, f"spark_jobs.api's docstring does not name {name}"
    probe = ("import sys, spark_jobs.api; print(sorted(m for m in sys.modules if m.split('.')[0] == 'pyspark'"
             " or m.startswith(('spark_jobs.check', 'spark_jobs.catchup.job'))))")
    loaded = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True,
                            check=True).stdout.strip()
    assert loaded == "[]", f"importing spark_jobs.api loads {loaded}"


# The Spark jobs' rooms: common/ at the bottom; catchup/ and check/ on it, apart from each other; the entry
# modules and the surface on top.
SPARK_LAYERS = [
    ("common", ["spark_jobs.common"]),
    ("catchup", ["spark_jobs.catchup"]),
    ("check", ["spark_jobs.check"]),
    ("entries and surface", ["spark_jobs.api", "spark_jobs.consistency_check", "spark_jobs"]),
]


def test_the_spark_jobs_rooms_form_layers_and_the_two_jobs_stay_apart():
    graph = import_graph(ROOT / "spark_jobs")
    assert unlayered(graph, SPARK_LAYERS) == []
    assert upward_imports(graph, SPARK_LAYERS) == []
    between = [f"{m} -> {t}" for m, targets in graph.items() for t in targets
               if {layer_of(m, SPARK_LAYERS), layer_of(t, SPARK_LAYERS)} == {1, 2}]
    assert between == []
