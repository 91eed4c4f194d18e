"""The server's sub-packages import only those below them (see ``openenv_ws/server/__init__.py``).

limits < transport < runtime < session < routes: a module of one may import
the modules of those before it and of its own, never of those after it. The
check reads the source with :mod:`ast`, imports under ``if TYPE_CHECKING``
included, so a failure names the file and line.
"""

from __future__ import annotations

import ast
from pathlib import Path

SERVER = Path(__file__).resolve().parents[2] / "openenv_ws" / "server"
ORDER = ("limits", "transport", "runtime", "session", "routes")


def part_of(module: str) -> str | None:
    """The sub-package (or ``limits``) of a module name under ``openenv_ws.server``."""
    parts = module.split(".")
    if parts[:2] != ["openenv_ws", "server"] or len(parts) < 3:
        return None
    return parts[2] if parts[2] in ORDER else None


def imports(path: Path) -> list[tuple[int, str]]:
    """(line, absolute module) of each import in the server module at `path`."""
    parts = list(path.relative_to(SERVER.parent.parent).with_suffix("").parts)
    package = parts[:-1]
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            found.append((node.lineno, target))
            found += [(node.lineno, f"{target}.{alias.name}") for alias in node.names]
    return found


def test_each_part_of_the_server_imports_only_the_parts_below_it() -> None:
    wrong = []
    for path in sorted(SERVER.rglob("*.py")):
        relative = path.relative_to(SERVER)
        own = relative.parts[0].removesuffix(".py")
        if own not in ORDER:
            continue  # the package's own __init__: it re-exports the public names
        allowed = set(ORDER[: ORDER.index(own) + 1])
        for line, target in imports(path):
            part = part_of(target)
            if part is not None and part not in allowed:
                wrong.append(f"openenv_ws/server/{relative}:{line} imports {target} ({part})")
    assert not wrong, "\n".join(wrong)


def test_part_of_names_the_sub_package() -> None:
    assert part_of("openenv_ws.server.routes.app") == "routes"
    assert part_of("openenv_ws.server.limits") == "limits"
    assert part_of("openenv_ws.protocol") is None
