"""The package's layer order, checked on its own source: no module imports a higher layer.

The order is the pipeline's: plain helpers, then text and parsing, then what is read and
written (data), models and backends, detectors, context generation, evaluation, combination,
the run service, the API, and the command line on top. Imports made inside functions and
under TYPE_CHECKING count too: a lazy import of a higher layer is still a dependency on it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "mushroom"

# Lowest first. A module may import its own layer (without a circle) and any layer below.
LAYERS: list[list[str]] = [
    ["mushroom.version", "mushroom.util", "mushroom.errors"],
    ["mushroom.text", "mushroom.parsing"],
    ["mushroom.data"],
    ["mushroom.models"],
    ["mushroom.backends"],
    ["mushroom.detectors"],
    ["mushroom.retrieval"],
    ["mushroom.evaluation"],
    ["mushroom.combine"],
    ["mushroom.runs"],
    ["mushroom.api"],
    ["mushroom", "mushroom.cli", "mushroom.__main__"],
]


def _modules() -> dict[str, Path]:
    mods = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        mods[".".join(parts)] = path
    return mods


def _nodes(tree: ast.AST, typing_only: bool):
    """Every node, without the bodies of `if TYPE_CHECKING:` unless `typing_only` is wanted too."""
    todo = [tree]
    while todo:
        node = todo.pop()
        yield node
        if (
            not typing_only
            and isinstance(node, ast.If)
            and isinstance(node.test, ast.Name)
            and node.test.id == "TYPE_CHECKING"
        ):
            todo.extend(node.orelse)
            continue
        todo.extend(ast.iter_child_nodes(node))


def _imports(name: str, path: Path, mods: dict[str, Path], typing_only: bool = True) -> set[str]:
    """The mushroom modules `name` imports anywhere in its source (a package import: the package).

    With `typing_only=False`, imports under `if TYPE_CHECKING:` are left out: they run only for
    a type checker, so they make no circle at run time (a layer is still checked with them).
    """
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in _nodes(ast.parse(path.read_text(encoding="utf-8")), typing_only):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != "mushroom":
                continue
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                found.add(sub if sub in mods else target)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] == "mushroom")
    found.discard(name)
    return found


def _layer(module: str) -> int:
    best, depth = None, -1
    for index, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and prefix.count(".") > depth:
                best, depth = index, prefix.count(".")
    if best is None:
        raise AssertionError(f"{module} is in no layer: add it to LAYERS in tests/test_layers.py")
    return best


MODS = _modules()
GRAPH = {name: _imports(name, path, MODS) for name, path in MODS.items()}
RUNTIME = {name: _imports(name, path, MODS, typing_only=False) for name, path in MODS.items()}


def test_every_module_has_a_layer():
    for name in MODS:
        _layer(name)


def test_no_module_imports_a_higher_layer():
    wrong = [
        f"{name} (layer {_layer(name)}) imports {dep} (layer {_layer(dep)})"
        for name, deps in sorted(GRAPH.items())
        for dep in sorted(deps)
        if _layer(dep) > _layer(name)
    ]
    assert not wrong, "\n".join(wrong)


def test_no_import_circle():
    # Tarjan's strongly connected components over every import, lazy ones included
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for dep in RUNTIME.get(node, ()):
            if dep not in MODS:
                continue
            if dep not in index:
                visit(dep)
                low[node] = min(low[node], low[dep])
            elif dep in on_stack:
                low[node] = min(low[node], index[dep])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for name in sorted(MODS):
        if name not in index:
            visit(name)
    assert not circles, "import circles:\n" + "\n".join(" <-> ".join(c) for c in circles)


@pytest.mark.parametrize("package", sorted(n for n, p in MODS.items() if p.name == "__init__.py"))
def test_each_package_says_what_it_holds(package):
    doc = ast.get_docstring(ast.parse(MODS[package].read_text(encoding="utf-8")))
    assert doc and len(doc.split()) >= 8, (
        f"{package}/__init__.py needs a docstring: what it holds, what it may import"
    )


def test_the_command_line_is_imported_by_nothing_below_it():
    users = sorted(
        name
        for name, deps in GRAPH.items()
        if any(d == "mushroom.cli" or d.startswith("mushroom.cli.") for d in deps)
        and not (name.startswith("mushroom.cli") or name == "mushroom.__main__")
    )
    assert not users, f"modules outside mushroom.cli import it: {users}"


def _external_imports(path: Path) -> set[str]:
    """Top-level names of every package a module imports, inside functions too."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found


def test_only_the_command_line_and_the_report_draw_with_rich():
    """The run service, main job and run configs report through a Reporter; the CLI renders it.

    A lower layer that prints its own tables cannot be run silently (the API) or rendered
    another way (a notebook, a web page), and pulls the terminal library into every script.
    """
    allowed = ("mushroom.cli", "mushroom.evaluation.report")
    users = sorted(
        name
        for name, path in MODS.items()
        if "rich" in _external_imports(path)
        and not any(name == a or name.startswith(a + ".") for a in allowed)
    )
    assert not users, f"modules outside mushroom.cli and the report import rich: {users}"
