"""The package's imports run one way: each role package imports only those below it.

An ``ast`` walk over every module of kdraexp; a wrong arrow fails here with its file and line.
The table is the one each package's ``__init__`` states in words.
"""

from __future__ import annotations

import ast
from pathlib import Path

from kdraexp.dra import listing

PACKAGE = Path(__file__).parent.parent / "kdraexp"

MAY_IMPORT = {
    "app": {
        "serve",
        "sources",
        "exposition",
        "telemetry",
        "store",
        "families",
        "allocator",
        "kube",
        "cel",
        "dra",
        "util",
    },
    "serve": {"sources", "exposition", "telemetry", "dra", "util"},
    "sources": {"store", "families", "telemetry", "cel", "dra", "util"},
    "exposition": {"store", "families", "util"},
    "telemetry": {"store", "util"},
    "kube": {"dra", "util"},
    "store": {"families", "allocator", "cel", "dra", "util"},
    "families": {"allocator", "cel", "dra", "util"},
    "allocator": {"cel", "dra", "util"},
    "cel": {"dra", "util"},
    "dra": {"util"},
    "util": set[str](),
}
"""Per role package, the packages of kdraexp it may import besides itself."""
FACE = {"__init__", "__main__"}
"""The only modules at the top of kdraexp."""


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) for every absolute import of kdraexp in *path*."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
            found += [(node.lineno, name) for name in names[:1] if name.startswith("kdraexp.")]
            if node.module == "kdraexp":
                found += [(node.lineno, name) for name in names[1:]]
        elif isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.startswith("kdraexp.")]
    return found


def test_the_top_is_only_the_face() -> None:
    top = {path.stem for path in PACKAGE.glob("*.py")}
    assert top == FACE
    packages = {path.parent.name for path in PACKAGE.glob("*/__init__.py")}
    assert packages == set(MAY_IMPORT)


def test_every_package_says_its_role() -> None:
    for package in MAY_IMPORT:
        docstring = ast.get_docstring(ast.parse((PACKAGE / package / "__init__.py").read_text()))
        assert docstring, f"kdraexp/{package}/__init__.py has no docstring"


def test_imports_point_down() -> None:
    wrong = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE)
        if len(relative.parts) == 1:
            continue
        own = relative.parts[0]
        for line, module in _imports(path):
            target = module.split(".")[1]
            if target in {own, "__version__"} or target in MAY_IMPORT[own]:
                continue
            wrong.append(f"kdraexp/{relative}:{line} imports {module} ({own} → {target})")
    assert wrong == []


PURE = {"dra", "allocator"}
"""Packages that start nothing and wait for nothing: plain functions and data over the API."""
IMPURE = {"asyncio", "mmap", "multiprocessing", "select", "signal", "socket", "subprocess"}
IMPURE |= {"threading", "twisted", "treq", "klein", "ctypes", "resource"}


def test_the_model_is_pure() -> None:
    """The model and the allocator start no process or thread, map no memory, wait for nothing."""
    found = []
    for package in PURE:
        for path in sorted((PACKAGE / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                    names = [(node.lineno, node.module)]
                elif isinstance(node, ast.Import):
                    names = [(node.lineno, alias.name) for alias in node.names]
                else:
                    continue
                found += [
                    f"{path.relative_to(PACKAGE)}:{line} imports {name}"
                    for line, name in names
                    if name.split(".")[0] in IMPURE
                ]
    assert found == []


def test_the_store_calls_the_allocator_through_its_face() -> None:
    """The store builds the model through ``kdraexp.allocator`` alone; the families read it."""
    found = [
        f"store/{path.name}:{line} imports {module}"
        for path in sorted((PACKAGE / "store").rglob("*.py"))
        for line, module in _imports(path)
        if module.startswith("kdraexp.allocator.")
    ]
    assert found == []


def _module(path: Path) -> str:
    relative = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = relative.parts[:-1] if relative.name == "__init__" else relative.parts
    return ".".join(parts)


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The modules of *graph* that import each other, in groups of two or more (Tarjan)."""
    order: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(module: str) -> None:
        order[module] = low[module] = len(order)
        stack.append(module)
        for imported in sorted(graph.get(module, ())):
            if imported not in order:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in stack:
                low[module] = min(low[module], order[imported])
        if low[module] == order[module]:
            group = []
            while True:
                top = stack.pop()
                group.append(top)
                if top == module:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for module in sorted(graph):
        if module not in order:
            visit(module)
    return found


def test_no_module_imports_in_a_circle() -> None:
    """Not even for annotations: a circle is two modules that cannot be read one before the other.

    A package's face (its ``__init__``) imports its modules and is imported from outside only.
    """
    graph: dict[str, set[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        own = _module(path)
        faces = {own} | {".".join(own.split(".")[:n]) for n in range(1, own.count(".") + 1)}
        graph[own] = {module for _, module in _imports(path) if module not in faces} - {own}
    assert circles(graph) == []


def test_the_circle_check_sees_a_circle() -> None:
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_the_check_sees_a_wrong_arrow(tmp_path: Path) -> None:
    wrong = tmp_path / "wrong.py"
    wrong.write_text("from kdraexp.kube.client import KubeListClient\nfrom kdraexp import app\n")
    assert [module for _, module in _imports(wrong)] == ["kdraexp.kube.client", "kdraexp.app"]


LONGEST = 80
"""Lines a function of the package may take, its docstring and decorators included."""


def long_functions(source: str) -> list[tuple[str, int]]:
    """The functions of *source* longer than :data:`LONGEST` lines, with their lengths."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            first = min(part.lineno for part in [node, *node.decorator_list])
            lines = (node.end_lineno or node.lineno) - first + 1
            if lines > LONGEST:
                found.append((node.name, lines))
    return found


def test_no_function_is_longer_than_a_screen() -> None:
    """A function past 80 lines does several jobs: each is a function of its own."""
    found = [
        f"{path.relative_to(PACKAGE)} {name}: {lines} lines"
        for path in sorted(PACKAGE.rglob("*.py"))
        for name, lines in long_functions(path.read_text())
    ]
    assert found == []


def test_the_length_check_sees_a_long_function() -> None:
    body = "".join(f"    x{n} = {n}\n" for n in range(LONGEST - 2))
    assert long_functions(f"@decorated\ndef fits():\n{body}") == []
    assert long_functions(f"@decorated\nasync def long():\n{body}    return\n") == [
        ("long", LONGEST + 1)
    ]


def test_no_private_twisted_module_at_run_time() -> None:
    """Twisted is used through its public names; a private module only for annotations."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        typing_only = {
            id(node)
            for guard in ast.walk(tree)
            if isinstance(guard, ast.If) and ast.unparse(guard.test) == "TYPE_CHECKING"
            for node in ast.walk(guard)
        }
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and id(node) not in typing_only:
                module = node.module or ""
                if module.startswith("twisted") and "._" in module:
                    found.append(f"{path.relative_to(PACKAGE)}:{node.lineno} {module}")
            if isinstance(node, ast.Attribute) and node.attr in {
                "_exitSignal",
                "_raiseSynchronously",
                "_waitingForPort",
            }:
                found.append(f"{path.relative_to(PACKAGE)}:{node.lineno} .{node.attr}")
    assert found == []


GENERIC = (
    "store/collection.py",
    "store/reader.py",
    "store/clusterrows.py",
    "store/budget.py",
    "store/sharding.py",
    "sources/gather.py",
    "sources/watch.py",
)
"""Code that works for every kind, from the kinds' declarations (families/kind.py, and the
allocator's join for the cross-object families)."""
KIND_NAMES = {name for name, value in vars(listing).items() if isinstance(value, listing.Kind)}
"""The names of the kinds in :mod:`kdraexp.dra.listing`."""
KIND_STRINGS = {text for kind in listing.LIST_ORDER for text in (kind.kind, kind.plural)}


def test_generic_code_names_no_kind() -> None:
    """A kind's behaviour is in its KindSpec, not in branches of the generic code."""
    assert {"PODS", "RESOURCE_SLICES"} <= KIND_NAMES
    found = []
    for name in GENERIC:
        tree = ast.parse((PACKAGE / name).read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Name) and node.id in KIND_NAMES:
                found.append(f"{name}:{node.lineno} {node.id}")
            if isinstance(node, ast.Constant) and node.value in KIND_STRINGS:
                found.append(f"{name}:{node.lineno} {node.value!r}")
    assert found == []


def test_version_imports_nothing_else() -> None:
    """``kdraexp --version`` answers in the time Python starts: no Twisted, no exporter.

    It imported the whole exporter first (0.5 s warm, 2.5 s cold).
    """
    import subprocess
    import sys

    shown = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from kdraexp.app.cli import main; main(['--version']); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('twisted', 'kdraexp')))",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    from kdraexp import __version__

    assert shown == [f"kdraexp {__version__}", "['kdraexp', 'kdraexp.app', 'kdraexp.app.cli']"]
