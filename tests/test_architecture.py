"""The layering each package's docstring states, checked on the source (no imports executed).

Every ``import``/``from`` of a ``sleight`` module, at any depth (lazy imports inside functions
included), must be allowed for the importing layer. The rule that matters most: neither
instrument imports the other, and nothing below the CLI imports the CLI.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "sleight"

SHARED = {"backends", "position", "rundir", "progress", "render", "stats", "errors", "jury", "data", "paths"}
ALLOWED = {
    "errors": set(),
    "paths": {"errors"},
    "stats": {"stats"},
    "backends": {"backends", "errors"},
    "position": {"backends", "errors"},
    "progress": {"errors"},
    "render": set(),
    "rundir": {"errors"},
    "jury": {"jury", "backends", "position", "rundir", "progress", "stats", "errors"},
    "tamper": SHARED | {"tamper"},
    "readout": SHARED | {"readout"},
}


def _layer(path: Path) -> str:
    rel = path.relative_to(SRC)
    return rel.parts[0].removesuffix(".py") if rel.parts else ""


def _imported(tree: ast.AST) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + ([f"{node.module}.{a.name}" for a in node.names] if node.module == "sleight" else [])
        else:
            continue
        for n in names:
            parts = n.split(".")
            if parts[0] == "sleight" and len(parts) > 1:
                out.add(parts[1])
    return out


MODULES = sorted(p for p in SRC.rglob("*.py") if _layer(p) in ALLOWED)


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(SRC)))
def test_layers_import_only_what_their_docstring_allows(path: Path) -> None:
    layer = _layer(path)
    # the root package's own names (its version, the OpenMP settings it makes before torch loads)
    # are every layer's: importing any sleight module runs sleight/__init__.py first
    bad = _imported(ast.parse(path.read_text(encoding="utf-8"))) - ALLOWED[layer] - {"__version__", "OPENMP_ENV"}
    assert not bad, f"{path.relative_to(SRC)} ({layer}) imports sleight.{', sleight.'.join(sorted(bad))}"


def test_every_package_says_what_it_is() -> None:
    for init in SRC.rglob("__init__.py"):
        doc = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8")))
        assert doc and len(doc) > 20, f"{init.relative_to(SRC)} has no docstring saying what the package is"


# -- the floor plan of sleight.readout (issue #27 item 5) ---------------------------------------------
# Each sub-layer may import its own layer and those below it, never one above: the item types at the
# bottom, then the paper's data, then the instruments, then the downstream runs, then reproduce.
READOUT_TIERS: tuple[tuple[str, ...], ...] = (
    ("items",),
    ("data",),
    ("audit", "ptrue", "forecast", "scan"),
    ("downstream_run", "downstream_report"),
    ("reproduce",),
)
READOUT = SRC / "readout"


def _module(path: Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _readout_imports(path: Path) -> set[str]:
    """Every ``sleight.readout`` module ``path`` imports, at any depth (lazy imports included); a
    ``from package import name`` of a submodule counts as that submodule."""
    known = {_module(p) for p in READOUT.rglob("*.py")}
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 and node.module.startswith("sleight.readout"):
            subs = {f"{node.module}.{a.name}" for a in node.names} & known
            out |= subs or {node.module}
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("sleight.readout")}
    return out


def _tier(module: str) -> int | None:
    parts = module.split(".")
    if len(parts) < 3:
        return None  # the package facade (sleight.readout), above every tier
    for k, names in enumerate(READOUT_TIERS):
        if parts[2] in names:
            return k
    raise AssertionError(f"{module} is in no readout sub-layer: add it to READOUT_TIERS")


READOUT_MODULES = sorted(READOUT.rglob("*.py"))


@pytest.mark.parametrize("path", READOUT_MODULES, ids=lambda p: str(p.relative_to(SRC)))
def test_readout_sub_layers_import_only_downwards(path: Path) -> None:
    """items < data < audit/ptrue/forecast/scan < downstream < reproduce (issue #27 item 5)."""
    mine = _tier(_module(path))
    if mine is None:
        return
    up = sorted(m for m in _readout_imports(path) if (t := _tier(m)) is not None and t > mine)
    assert not up, f"{path.relative_to(SRC)} (sub-layer {READOUT_TIERS[mine]}) imports {', '.join(up)} from above it"


def test_readout_has_no_import_circle() -> None:
    """No module of sleight.readout reaches itself through its imports, lazy ones included."""
    graph = {_module(p): _readout_imports(p) for p in READOUT_MODULES}
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for n in sorted(graph.get(m, ())):
            if state.get(n) == 1:
                raise AssertionError("import circle: " + " -> ".join(stack[stack.index(n) :] + [n]))
            if n not in state:
                visit(n)
        stack.pop()
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m)
