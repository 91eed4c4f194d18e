"""Layering: the runtime stands on its own, its modules import no cycle and no private name.

- ``openenv_ws`` and every module in it import in an interpreter where
  ``atari`` and ``benchmarks`` cannot be imported, and no import statement of
  the runtime names them, not even inside a function: environments are
  plugins found by entry point, and ``openenv-ws bench`` finds the benchmark
  suite by name when it runs.
- The import graphs of ``openenv_ws`` and ``atari`` (imports inside functions included) have no
  cycle, neither at run time nor with the imports under ``if TYPE_CHECKING``.
- No module of ``openenv_ws`` or ``atari`` imports a private name
  (``from .x import _name``) of another module: what is shared is public.

The checks read the source with :mod:`ast` (no module is run but in the
first), so each failure names the file and line to fix.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
RUNTIME = "openenv_ws"
#: Packages the runtime must never need.
BLOCKED = ("atari", "benchmarks")
#: Modules that do something when imported: ``python -m openenv_ws`` runs the command.
NOT_IMPORTABLE = {"openenv_ws.__main__"}

BLOCKER = textwrap.dedent(
    """
    import importlib.abc, sys

    class Blocked(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in {blocked!r}:
                raise ImportError(f"{{name}} is blocked: the runtime must not import it")
            return None

    sys.meta_path.insert(0, Blocked())
    """
)

IMPORT_ALL = textwrap.dedent(
    """
    import importlib, pkgutil, sys
    import {runtime}

    failed = []
    names = [m.name for m in pkgutil.walk_packages({runtime}.__path__, "{runtime}.")]
    for name in sorted(set(names) - {skip!r}):
        try:
            importlib.import_module(name)
        except Exception as exc:
            failed.append(f"{{name}}: {{type(exc).__name__}}: {{exc}}")
    leaked = sorted(m for m in sys.modules if m.split(".")[0] in {blocked!r})
    from {runtime}.cli import _parser
    serve = _parser().parse_args(["serve", "--env", "fake"])
    print(len(names), "modules")
    print("\\n".join(failed))
    assert not failed and not leaked and serve.env == "fake", (failed, leaked)
    """
)


def run_blocked(code: str) -> subprocess.CompletedProcess[str]:
    """Run `code` in a fresh interpreter in which the blocked packages cannot be imported."""
    script = BLOCKER.format(blocked=set(BLOCKED)) + code
    return subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, check=False
    )


def test_the_runtime_imports_without_atari_and_benchmarks() -> None:
    done = run_blocked(
        IMPORT_ALL.format(runtime=RUNTIME, skip=NOT_IMPORTABLE, blocked=set(BLOCKED))
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert int(done.stdout.split()[0]) > 40, done.stdout  # the walk found the package


def test_the_blocker_blocks() -> None:
    """The check above can fail: a runtime that imports a blocked package does."""
    done = run_blocked("import openenv_ws\nimport atari\n")
    assert done.returncode != 0 and "atari is blocked" in done.stderr, done.stderr


# ---------------------------------------------------------------------------- the source


def modules(package: str) -> dict[str, Path]:
    """Every module of `package` by dotted name (a package by its own name)."""
    found = {}
    for path in sorted((ROOT / package).rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def resolve(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    """The absolute name of the module an ``ImportFrom`` in `module` imports from."""
    if not node.level:
        return node.module or ""
    base = module.split(".")
    base = base if is_package else base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def under_type_checking(tree: ast.Module) -> set[ast.AST]:
    """The import nodes only type checkers run (``if TYPE_CHECKING:``)."""
    skipped: set[ast.AST] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for inner in node.body:
                skipped.update(ast.walk(inner))
    return skipped


def imports(
    package: str, typed: bool = False
) -> Iterator[tuple[str, Path, ast.Import | ast.ImportFrom, str]]:
    """(importing module, its file, the import node, the module imported from) of `package`;
    `typed`: with the imports only type checkers run."""
    for module, path in modules(package).items():
        tree = ast.parse(path.read_text(), str(path))
        skipped = set() if typed else under_type_checking(tree)
        for node in ast.walk(tree):
            if node in skipped:
                continue
            if isinstance(node, ast.Import):
                for alias in node.names:
                    yield module, path, node, alias.name
            elif isinstance(node, ast.ImportFrom):
                yield module, path, node, resolve(module, path.name == "__init__.py", node)


def is_module(name: str) -> bool:
    """Whether `name` is a module or package in the tree (C extensions by their source,
    built or not)."""
    path = ROOT.joinpath(*name.split("."))
    return path.is_dir() or path.with_suffix(".py").is_file() or path.with_suffix(".c").is_file()


def import_graph(package: str, typed: bool = False) -> dict[str, set[str]]:
    """Module -> the modules of `package` it imports (a parent package's own import aside;
    `typed`: with the imports only type checkers run)."""
    known = modules(package)
    graph: dict[str, set[str]] = {name: set() for name in known}
    for module, _, node, target in imports(package, typed):
        names = [alias.name for alias in node.names] if isinstance(node, ast.ImportFrom) else []
        submodules = [f"{target}.{name}" for name in names if is_module(f"{target}.{name}")]
        targets = submodules if names and len(submodules) == len(names) else [target, *submodules]
        graph[module].update(t for t in targets if t in known and t != module)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[tuple[str, ...]]:
    """The strongly connected components of more than one module (Tarjan), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[tuple[str, ...]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in graph[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(tuple(sorted(component)))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def test_no_runtime_module_imports_atari_or_benchmarks_even_inside_a_function() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{node.lineno} imports {target}"
        for _, path, node, target in imports(RUNTIME)
        if target.split(".")[0] in BLOCKED
    ]
    assert not found, f"the runtime finds plugins by entry point, it does not import them: {found}"


@pytest.mark.parametrize("package", [RUNTIME, "atari"])
@pytest.mark.parametrize("typed", [False, True], ids=["run-time", "type-checking"])
def test_no_import_cycle(package: str, typed: bool) -> None:
    """No cycle at run time, nor with the imports only type checkers run: a module that
    needs another's types depends on it as much as one that calls it."""
    found = cycles(import_graph(package, typed))
    assert not found, f"import cycles among {package} modules: {found}"


def private_imports(package: str) -> dict[str, str]:
    """``"module: name"`` -> ``file:line`` for each private name imported from another module."""
    found = {}
    for module, path, node, target in imports(package):
        if not isinstance(node, ast.ImportFrom) or target.split(".")[0] not in (RUNTIME, *BLOCKED):
            continue
        for alias in node.names:
            name = alias.name
            private = name.startswith("_") and not name.startswith("__")
            if private and target != module and not is_module(f"{target}.{name}"):
                where = f"{path.relative_to(ROOT)}:{node.lineno}"
                found[f"{module}: {target}.{name}"] = where
    return found


@pytest.mark.parametrize("package", [RUNTIME, "atari"])
def test_no_module_imports_a_private_name_of_another(package: str) -> None:
    found = private_imports(package)
    assert not found, f"private names imported across modules (make them public): {found}"


def test_the_checks_see_what_they_look_for(tmp_path: Path) -> None:
    """The source checks can fail: a cycle and a private import written on purpose are found."""
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [("a", "b", "c")]
    tree = ast.parse("from .x import _hidden, shown\nfrom . import y\n")
    first, second = (node for node in tree.body if isinstance(node, ast.ImportFrom))
    assert resolve("openenv_ws.server.app", False, first) == "openenv_ws.server.x"
    assert resolve("openenv_ws.server", True, second) == "openenv_ws.server"


def private_runtime_modules(package: str) -> list[str]:
    """``file:line imports name`` for each private module of the runtime `package` imports."""
    found = []
    for _, path, node, target in imports(package):
        names = [target]
        if isinstance(node, ast.ImportFrom):
            names += [f"{target}.{alias.name}" for alias in node.names]
        for name in names:
            parts = name.split(".")
            if parts[0] == RUNTIME and is_module(name) and any(p.startswith("_") for p in parts):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} imports {name}")
    return found


def test_a_plugin_uses_only_public_modules_of_the_runtime() -> None:
    found = private_runtime_modules("atari")
    assert not found, f"atari is a plugin: it may use only the runtime's public modules: {found}"


def test_the_plugin_check_sees_a_private_module() -> None:
    assert private_runtime_modules(RUNTIME), "the runtime's own private imports are not seen"


# ---------------------------------------------------------------------------- the report


def report(package: str = RUNTIME) -> str:
    """The import-graph facts of `package`: modules and lines per sub-package, the largest
    modules, and its cycles at run time and with type checkers' imports (``python
    tests/test_layering.py``)."""
    found = modules(package)
    lines = {name: len(path.read_text().splitlines()) for name, path in found.items()}
    parts: dict[str, list[str]] = {}
    for name, path in found.items():
        inner = path.relative_to(ROOT / package).parent.parts
        parts.setdefault(".".join((package, *inner)), []).append(name)
    out = ["| part | modules | lines | largest |", "|---|---:|---:|---|"]
    for part, names in sorted(parts.items()):
        top = max(names, key=lines.__getitem__)
        total = sum(lines[n] for n in names)
        out.append(f"| {part} | {len(names)} | {total} | {top} ({lines[top]}) |")
    runtime, typed = import_graph(package), import_graph(package, typed=True)
    out.append(f"\n{len(found)} modules, {sum(lines.values())} lines")
    out.append(f"import edges: {sum(map(len, runtime.values()))} at run time")
    out.append(f"cycles at run time: {cycles(runtime) or 'none'}")
    out.append(f"cycles with TYPE_CHECKING imports: {cycles(typed) or 'none'}")
    return "\n".join(out)


if __name__ == "__main__":
    print(report(sys.argv[1] if len(sys.argv) > 1 else RUNTIME))
