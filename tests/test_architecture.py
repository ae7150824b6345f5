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

SHARED = {"backends", "position", "rundir", "progress", "render", "stats", "errors", "jury", "data"}
ALLOWED = {
    "errors": set(),
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
    bad = _imported(ast.parse(path.read_text(encoding="utf-8"))) - ALLOWED[layer] - {"__version__"}
    assert not bad, f"{path.relative_to(SRC)} ({layer}) imports sleight.{', sleight.'.join(sorted(bad))}"


def test_every_package_says_what_it_is() -> None:
    for init in SRC.rglob("__init__.py"):
        doc = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8")))
        assert doc and len(doc) > 20, f"{init.relative_to(SRC)} has no docstring saying what the package is"
