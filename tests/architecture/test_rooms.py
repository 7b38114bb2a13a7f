"""Core by role, checked: what `lint-imports` cannot say about the code's shape.

`make lint` runs the import contracts (pyproject.toml, [tool.importlinter]): core's
rooms import downward, the backends know nothing of each other, the model is pure,
server/ and the console go through the ops door. These tests hold the rest, read
from the source as text (nothing is imported or run):

- no import cycle between any two modules of core, of server/, nor of the console
  (tui/), counting imports inside functions and under TYPE_CHECKING, absolute or
  relative; no server module imports another inside a function;
- no module reaches another module's private names (`other._name`, or
  `from ... import _name`), in core/, server/ or tui/; the reaches into third-party
  internals that cannot be avoided live in one `compat.py` each, with their tests;
- the composition root stays a composition root (`runtime.py` at most 400 lines),
  no core module passes 600 lines, no server module 400;
- the pure room holds at least five modules;
- no one- or two-letter aliases of project modules.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CORE = ROOT / "core"
SERVER = ROOT / "server"
TUI = ROOT / "tui"
COMPAT = {ROOT / "tui" / "compat.py", CORE / "storage" / "sqlite" / "compat.py"}
# Names with a leading underscore that are public API (namedtuple's, os._exit, and
# sys._current_frames, documented for tools such as the loop's watchdog).
PUBLIC_UNDERSCORE = {"_replace", "_asdict", "_fields", "_make", "_exit", "_field_defaults",
                     "_current_frames"}
IMPURE = {"asyncio", "threading", "concurrent", "socket", "sqlite3", "aiosqlite", "asyncpg",
          "websockets", "selectors", "subprocess"}


def sources(*folders: Path) -> Iterator[Path]:
    for folder in folders:
        yield from sorted(folder.rglob("*.py"))


def module_name(path: Path, folder: Path = CORE) -> str:
    parts = list(path.relative_to(folder).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join([f"alarmtop.{folder.name}", *parts])


def absolute(node: ast.ImportFrom, importer: str, is_package: bool) -> str:
    """The module a `from ... import` names, a relative one (`from .x`) resolved."""
    if not node.level:
        return node.module or ""
    parts = importer.split(".") if is_package else importer.split(".")[:-1]
    parts = parts[:len(parts) - (node.level - 1)]
    return ".".join([*parts, node.module] if node.module else parts)


def imports_among(folder: Path) -> dict[str, set[str]]:
    """Each module's imports of the other modules of `folder` (core, server, tui):
    every kind, wherever it is."""
    package = f"alarmtop.{folder.name}"
    modules = {module_name(p, folder): p for p in sources(folder)}
    edges: dict[str, set[str]] = {m: set() for m in modules}
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text())):
            module = absolute(node, name, path.name == "__init__.py") \
                if isinstance(node, ast.ImportFrom) else ""
            if module.startswith(package):
                assert isinstance(node, ast.ImportFrom)
                for alias in node.names:
                    target = f"{module}.{alias.name}"
                    target = target if target in modules else module
                    if target in modules and target != name:
                        edges[name].add(target)
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name in modules and alias.name != name:
                        edges[name].add(alias.name)
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in edges:
        if v not in index:
            visit(v)
    return found


def own_private_names(source: str, tree: ast.AST) -> set[str]:
    """The private names a file defines itself (attributes set on self or cls, methods,
    classes, module names, slots): reaching them from inside the file is no reach."""
    names = set(re.findall(r"(?:self|cls)\.(_[A-Za-z0-9_]+)\s*[:=]", source))
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            names.add(node.value)  # __slots__ entries
    return {n for n in names if n.startswith("_")}


def private_reaches(path: Path) -> list[str]:
    source = path.read_text()
    tree = ast.parse(source)
    own = own_private_names(source, tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") \
                and not node.attr.startswith("__"):
            value = node.value
            if isinstance(value, ast.Name) and value.id in ("self", "cls"):
                continue
            if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and \
                    value.func.id == "super":
                continue
            if node.attr in PUBLIC_UNDERSCORE or node.attr in own:
                continue
            found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(value)}"
                         f".{node.attr}")
        elif isinstance(node, ast.ImportFrom) and node.module and \
                node.module.startswith("alarmtop"):
            found += [f"{path.relative_to(ROOT)}:{node.lineno}: import {a.name}"
                      for a in node.names if a.name.startswith("_")]
    return found


def test_no_two_core_modules_import_each_other_even_indirectly() -> None:
    assert cycles(imports_among(CORE)) == []


def test_no_two_server_modules_import_each_other_even_indirectly() -> None:
    """The command table's layers (protocol < rows < the commands by subject <
    commands < wire < ops < app) and everything beside them."""
    assert cycles(imports_among(SERVER)) == []


def test_no_two_console_modules_import_each_other_even_indirectly() -> None:
    """The app on top, the command palette (`commands`) under it, the views and
    dialogs under that, and what they know of the app (`console.Console`) under
    them; `alarmtop` (`cli`) over `alarmtop web` (`web/cli`), what both use in
    `cli_support`."""
    assert cycles(imports_among(TUI)) == []


def imported(node: ast.AST) -> list[str]:
    """The modules an import statement names (none for any other statement)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if isinstance(node, ast.ImportFrom):
        return [node.module or ""]
    return []


def test_no_server_module_imports_another_inside_a_function() -> None:
    """An import in a function hides an edge (and, often, a cycle) from whoever reads
    the top of the file: between server modules, every import is at the top."""
    found = []
    for path in sources(SERVER):
        for fn in ast.walk(ast.parse(path.read_text())):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            found += [f"{path.relative_to(ROOT)}:{node.lineno}" for node in ast.walk(fn)
                      if any(name.startswith("alarmtop.server") for name in imported(node))]
    assert found == []


def test_the_checks_see_a_cycle_and_a_reach_when_there_is_one(tmp_path: Path) -> None:
    """The checks themselves, on made-up input: they would fail if the code had one."""
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert "alarmtop.server.wire" in imports_among(SERVER)["alarmtop.server.ops"]
    # An edge counts inside a function, under TYPE_CHECKING, and relative.
    sample = tmp_path / "tui"
    (sample / "views").mkdir(parents=True)
    (sample / "app.py").write_text("def f():\n    from alarmtop.tui.views import home\n")
    (sample / "views" / "__init__.py").write_text("from . import home\n")
    (sample / "views" / "home.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
        "    from ..app import f\n")
    assert cycles(imports_among(sample)) == [
        ["alarmtop.tui.app", "alarmtop.tui.views.home"]]
    file = ROOT / "tests" / "architecture" / "_reach_sample.py"
    file.write_text("def f(other):\n    return other._secret, other._replace()\n")
    try:
        assert [r.split(": ")[1] for r in private_reaches(file)] == ["other._secret"]
    finally:
        file.unlink()


@pytest.mark.parametrize("folder", ["core", "server", "tui"])
def test_no_module_reaches_another_modules_private_names(folder: str) -> None:
    reaches = [r for p in sources(ROOT / folder) if p not in COMPAT
               for r in private_reaches(p)]
    assert reaches == []


def test_runtime_only_builds_wires_and_forwards() -> None:
    lines = len((CORE / "runtime.py").read_text().splitlines())
    assert lines <= 400, f"runtime.py has {lines} lines; what is not wiring belongs in a room"


@pytest.mark.parametrize("folder, most", [(CORE, 600), (SERVER, 400)])
def test_no_module_is_over_its_rooms_size(folder: Path, most: int) -> None:
    long = {str(p.relative_to(ROOT)): n for p in sources(folder)
            if (n := len(p.read_text().splitlines())) > most}
    assert long == {}


def test_the_pure_room_is_a_room_and_imports_no_io() -> None:
    modules = [p for p in sources(CORE / "model") if p.name != "__init__.py"]
    assert len(modules) >= 5
    for path in modules:
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            bad = [n for n in names if n.split(".")[0] in IMPURE]
            assert not bad, f"{path.relative_to(ROOT)} imports {bad}"


def test_no_one_or_two_letter_aliases_of_project_modules() -> None:
    alias = re.compile(r"^\s*from alarmtop[\w.]* import \w+ as (\w{1,2})\b", re.M)
    found = [f"{p.relative_to(ROOT)}: {m}" for p in sources(CORE, ROOT / "server",
                                                           ROOT / "tui", ROOT / "tests")
             for m in alias.findall(p.read_text())]
    assert found == []
