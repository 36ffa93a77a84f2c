"""The layering that docs/architecture.md describes, checked on the imports themselves (read with `ast`, so
that an import inside a function counts as much as one at the top):

- `webhook/admission/` is the pure core: it imports neither the server nor the CLI, nor a module that does
  network or process I/O;
- the server and the CLI do not import each other, except `gpu-webhook serve` starting the server;
- no package has an import cycle among its modules.

Imports under `if TYPE_CHECKING:` are left out: they never run, and annotations may name any layer.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "webhook"

# Network, process and framework I/O: what the shells do, and the core never.
IO_MODULES = ("socket", "ssl", "subprocess", "http", "urllib.request", "flask", "gunicorn", "kubernetes", "requests")
# The one way the CLI reaches the server: `serve` builds and runs it (docs/architecture.md, "Where things live").
CLI_MAY_IMPORT_SERVER = {"webhook.cli.serve_cmd"}


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(path: Path) -> set[str]:
    """Every module `path` imports, at any depth, as absolute names (`from a import b` gives `a` and `a.b`)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    package = _module_name(path) if path.name == "__init__.py" else _module_name(path).rpartition(".")[0]
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names if alias.name != "*")
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


MODULES = {_module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}
IMPORTS = {name: _imports(path) for name, path in MODULES.items()}


def _within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def _offending(importer_prefix: str, imported_prefixes: tuple[str, ...], allowed: set[str] = frozenset()) -> list[str]:
    return sorted(
        f"{importer} imports {imported}"
        for importer, imported_names in IMPORTS.items()
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


def _cycle(package: str) -> list[str] | None:
    """One import cycle among `package`'s own modules, or None."""
    members = {name for name in MODULES if name.rpartition(".")[0] == package}
    graph = {name: sorted(members & IMPORTS[name] - {name}) for name in members}
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


@pytest.mark.parametrize("package", ["webhook", "webhook.admission", "webhook.server", "webhook.cli"])
def test_no_import_cycle_inside_a_package(package):
    cycle = _cycle(package)
    assert cycle is None, " -> ".join(cycle or [])


def test_the_checks_see_the_imports_they_judge():
    """The reader itself: a function-level import counts, a TYPE_CHECKING one does not, relative ones resolve."""
    assert "webhook.server.app" in IMPORTS["webhook.cli.serve_cmd"]  # imported inside `run`
    assert "webhook.cli.kube" in IMPORTS["webhook.cli.check_cmd"]  # inside `cluster_view`
    assert "webhook.admission.cluster" not in IMPORTS["webhook.cli.check_cmd"]  # under TYPE_CHECKING only
    assert "webhook.cli.common.CommandError" in IMPORTS["webhook.cli.kube"]
