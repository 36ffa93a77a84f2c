"""The layering that docs/architecture.md describes, checked on the imports themselves (read with `ast`, so
that an import inside a function counts as much as one at the top):

- `webhook/admission/` is the pure core: it imports neither the server nor the CLI, nor a module that does
  network or process I/O;
- the server and the CLI do not import each other, except `gpu-webhook serve` starting the server;
- no package has an import cycle among its modules;
- the core is layered, each layer a folder that imports only from the folders below it (`CORE_LAYERS`), and
  no module of the core is part of an import cycle, type-only imports included: an annotation that names a
  higher layer is a dependency too, and the cycle it closes is the sign of vocabulary in the wrong place.

For the shells, imports under `if TYPE_CHECKING:` are left out: they never run, and annotations may name any
layer.
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "webhook"

# Network, process and framework I/O: what the shells do, and the core never.
IO_MODULES = ("socket", "ssl", "subprocess", "http", "urllib.request", "flask", "gunicorn", "kubernetes", "requests")
# The one way the CLI reaches the server: `serve` builds and runs it (docs/architecture.md, "Where things live").
CLI_MAY_IMPORT_SERVER = {"webhook.cli.serve_cmd"}
# The core's layers, lowest first (docs/architecture.md): a module may import from its own folder and the
# folders before it. The modules directly in webhook/admission/ (engine, review, customresources) are the top.
CORE_LAYERS = ("base", "policy", "cluster", "sharing", "phases", "dra", "checks", "budgets", "native")


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(path: Path) -> tuple[set[str], set[str]]:
    """Every module `path` imports, at any depth, as absolute names (`from a import b` gives `a` and `a.b`):
    those that run (not under `if TYPE_CHECKING:`), and all of them. One parse of the file gives both."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    package = _module_name(path) if path.name == "__init__.py" else _module_name(path).rpartition(".")[0]
    running: set[str] = set()
    every: set[str] = set()

    def visit(node: ast.AST, type_only: bool) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.body:
                visit(child, True)
            for child in node.orelse:
                visit(child, type_only)
            return
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            names = [base, *(f"{base}.{alias.name}" for alias in node.names if alias.name != "*")]
        every.update(names)
        if not type_only:
            running.update(names)
        for child in ast.iter_child_nodes(node):
            visit(child, type_only)

    visit(tree, False)
    return running, every


MODULES = {_module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


@cache
def _read() -> dict[str, tuple[set[str], set[str]]]:
    """Every module's imports, read once, when a test first asks (not at collection, in every worker)."""
    return {name: _imports(path) for name, path in MODULES.items()}


def imports_running() -> dict[str, set[str]]:
    """What runs: TYPE_CHECKING ones left out."""
    return {name: running for name, (running, _) in _read().items()}


def imports_all() -> dict[str, set[str]]:
    """Type-only imports included."""
    return {name: every for name, (_, every) in _read().items()}


def _within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def _offending(importer_prefix: str, imported_prefixes: tuple[str, ...], allowed: set[str] = frozenset()) -> list[str]:
    return sorted(
        f"{importer} imports {imported}"
        for importer, imported_names in imports_running().items()
        if _within(importer, importer_prefix) and importer not in allowed
        for imported in imported_names
        if any(_within(imported, prefix) for prefix in imported_prefixes)
    )


def test_the_core_imports_no_shell_and_no_io():
    assert _offending("webhook.admission", ("webhook.server", "webhook.cli", *IO_MODULES)) == []


def test_the_server_does_not_import_the_cli():
    assert _offending("webhook.server", ("webhook.cli",)) == []


def test_the_cli_reaches_the_server_only_to_serve():
    assert _offending("webhook.cli", ("webhook.server",), allowed=CLI_MAY_IMPORT_SERVER) == []


def _cycle(package: str, imports: dict[str, set[str]] | None = None, deep: bool = False) -> list[str] | None:
    """One import cycle among `package`'s own modules (with `deep`, those of its subpackages too), or None."""
    imports = imports_running() if imports is None else imports
    members = {name for name in MODULES if (_within(name, package) if deep else name.rpartition(".")[0] == package)}
    graph = {name: sorted(members & imports[name] - {name}) for name in members}
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def walk(name: str) -> list[str] | None:
        state[name] = 1
        path.append(name)
        for nxt in graph[name]:
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (found := walk(nxt)):
                return found
        path.pop()
        state[name] = 2
        return None

    for name in sorted(members):
        if name not in state and (found := walk(name)):
            return found
    return None


PACKAGES = sorted({name.rpartition(".")[0] for name in MODULES if name.count(".") > 1} | {"webhook"})


@pytest.mark.parametrize("package", PACKAGES)
def test_no_import_cycle_inside_a_package(package):
    cycle = _cycle(package)
    assert cycle is None, " -> ".join(cycle or [])


def test_no_import_cycle_in_the_core_type_only_imports_included():
    cycle = _cycle("webhook.admission", imports_all(), deep=True)
    assert cycle is None, " -> ".join(cycle or [])


def _layer(module: str) -> int:
    """The rank of a core module's layer: its folder's place in CORE_LAYERS, the top for the package's own."""
    parts = module.split(".")
    if len(parts) > 2 and parts[2] in CORE_LAYERS:
        return CORE_LAYERS.index(parts[2])
    return len(CORE_LAYERS)


def _core_modules(imported: set[str]) -> set[str]:
    """The core modules among import names (`a.b.name` of `from a.b import name` is `a.b`'s, or the module)."""
    return {name for name in imported if name in MODULES and _within(name, "webhook.admission")}


def test_every_core_folder_is_a_layer():
    folders = {path.name for path in (PACKAGE / "admission").iterdir() if (path / "__init__.py").exists()}
    assert folders == set(CORE_LAYERS)


def test_each_core_layer_imports_only_from_the_layers_below():
    upward = sorted(
        f"{importer} imports {imported}"
        for importer, imported_names in imports_all().items()
        if _within(importer, "webhook.admission")
        for imported in _core_modules(imported_names)
        if _layer(imported) > _layer(importer)
    )
    assert upward == []


def test_the_checks_see_the_imports_they_judge():
    """The reader itself: a function-level import counts, a TYPE_CHECKING one does not, relative ones resolve."""
    running = imports_running()
    assert "webhook.server.app" in running["webhook.cli.serve_cmd"]  # imported inside `run`
    assert "webhook.cli.kube" in running["webhook.cli.check_cmd"]  # inside `cluster_view`
    assert "webhook.admission.cluster.nodes" not in running["webhook.cli.check_cmd"]  # under TYPE_CHECKING only
    assert "webhook.cli.common.CommandError" in running["webhook.cli.kube"]


def test_the_layer_check_sees_an_import_up():
    """The rule itself: a phase may read the sharing backends, a backend may not read a phase."""
    assert _layer("webhook.admission.base.quantity") < _layer("webhook.admission.sharing.memshare")
    assert _layer("webhook.admission.phases.mutate") < _layer("webhook.admission.engine")
    assert _core_modules({"webhook.admission.phases.mutate", "webhook.admission.phases.mutate.mutate"}) == {
        "webhook.admission.phases.mutate"
    }
