"""The client's modules import each other in one direction only, and nothing of the
server: read from the source with ``ast``, every import statement anywhere in a module
(inside a function or under ``TYPE_CHECKING`` too: a lazy import that dodges a cycle at
import time is still a cycle of the design), relative imports resolved."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "client" / "oversight_client"
SERVER = ("django", "runs", "oversight", "graphs")  # Django, and the server's packages


def modules(package: Path) -> dict[str, Path]:
    """The package's modules by dotted name (a package by its own name)."""
    found = {}
    for path in sorted(package.rglob("*.py")):
        parts = path.relative_to(package.parent).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imported(name: str, path: Path, known: set[str]) -> set[str]:
    """Every module ``name`` imports, by absolute dotted name."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0]
                base = f"{anchor}.{base}" if base else anchor
            # ``from package import module`` imports the module, ``from module import
            # name`` the module.
            for alias in node.names:
                names.add(full if (full := f"{base}.{alias.name}") in known else base)
    return names - {name}


def import_graph(package: Path) -> dict[str, set[str]]:
    found = modules(package)
    known = set(found)
    return {name: imported(name, path, known) for name, path in found.items()}


def cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """A cycle of the graph's own modules (its first module repeated at its end), or
    None."""
    done: set[str] = set()

    def visit(name: str, path: list[str]) -> list[str] | None:
        if name in path:
            return [*path[path.index(name) :], name]
        if name in done or name not in graph:
            return None
        for target in sorted(graph[name]):
            if found := visit(target, [*path, name]):
                return found
        done.add(name)
        return None

    for start in sorted(graph):
        if found := visit(start, []):
            return found
    return None


def test_the_client_modules_import_each_other_without_a_cycle():
    found = cycle(import_graph(PACKAGE))
    assert found is None, "the client's modules import in a circle: " + " → ".join(found)


def test_the_client_imports_nothing_of_django_or_the_server():
    graph = import_graph(PACKAGE)
    server = {
        f"{name} imports {target}"
        for name, targets in graph.items()
        for target in targets
        if target.split(".")[0] in SERVER
    }
    assert not server, sorted(server)


def test_an_import_inside_a_function_closes_a_cycle(tmp_path):
    """The check sees what import time does not: an import inside a function."""
    package = tmp_path / "agent"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "low.py").write_text("def later():\n    from agent.high import x\n")
    (package / "high.py").write_text("from . import low\nx = 1\n")
    (package / "side.py").write_text("from .low import later\n\ndef f():\n    import django.db\n")

    graph = import_graph(package)

    assert graph["agent.side"] == {"agent.low", "django.db"}
    assert cycle(graph) == ["agent.high", "agent.low", "agent.high"]
