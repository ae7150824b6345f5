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
    "rundir": {"rundir", "errors"},
    "jury": {"jury", "backends", "position", "rundir", "progress", "stats", "errors"},
    "tamper": SHARED | {"tamper"},
    "readout": SHARED | {"readout"},
    "cli": SHARED | {"tamper", "readout", "cli"},
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


# -- the floor plan of every layer (issue #27 item 5 for readout, #33 item 5 for the rest) ----------
# Within a layer, each sub-layer (a module or sub-package directly under the layer) may import its own
# tier and those below it, never one above. Tiers list bottom first.
TIERS: dict[str, tuple[tuple[str, ...], ...]] = {
    "backends": (
        ("base", "heap", "resolve", "memory", "architectures"),
        ("tokens", "spec", "kv_slab", "ragged", "cache_ops", "decode_state", "transport", "vllm_wire"),
        ("sampling", "decode_stream", "vllm_registry"),
        ("hf", "request_engine"),
        ("vllm", "chat", "served_probe", "served_wire", "seq2seq"),
        ("served",),
        ("served_llama",),
    ),
    "jury": (
        ("verdict", "ballot", "study_text", "sample", "store"),
        ("rules", "cast"),
        ("slots",),
        ("jurors",),
        ("runner",),
    ),
    "tamper": (
        ("data", "lexical", "signals", "trigger"),
        ("engine",),
        ("records", "reference", "schedule", "two_phase"),
        ("store",),
        ("job",),
        ("runner",),
        ("jury",),
        ("report", "sweep"),  # the sweep writes the report; the report reads a sweep's plan
    ),
    "readout": (
        ("items",),
        ("data",),
        ("audit", "ptrue", "forecast", "scan"),
        ("downstream_run", "downstream_report"),
        ("reproduce",),
    ),
    "stats": (
        ("metrics", "bootstrap"),
        ("rank", "downstream"),
    ),
    "rundir": (
        ("files", "schema"),
        ("parts", "config"),
        ("sessions",),
        ("directory",),
    ),
    "cli": (
        ("common",),
        ("jury_args", "demo"),
        (
            "readout_audit", "readout_downstream", "readout_estimators", "readout_forecast_readouts", "readout_judge",
            "readout_labels", "readout_reproduce", "readout_scan", "tamper_gold", "tamper_report", "tamper_run", "tamper_sweep",
        ),
        ("readout", "tamper"),
        ("main",),
    ),
}
READOUT_TIERS = TIERS["readout"]


def _module(path: Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


ALL_MODULES = sorted(SRC.rglob("*.py"))
KNOWN = {_module(p) for p in ALL_MODULES}


def _sleight_imports(path: Path) -> set[str]:
    """Every ``sleight`` module ``path`` imports, at any depth (lazy imports included); a ``from
    package import name`` of a submodule counts as that submodule. A registry that imports its
    members by name (``importlib``) would hide them from this reader: registries import plainly."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 and node.module.startswith("sleight"):
            subs = {f"{node.module}.{a.name}" for a in node.names} & KNOWN
            out |= subs or {node.module}
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("sleight")}
    return out & KNOWN


def _tier(module: str) -> int | None:
    parts = module.split(".")
    if len(parts) < 3 or parts[1] not in TIERS:
        return None  # a layer's facade (sleight.readout), above its tiers; or a one-module layer
    for k, names in enumerate(TIERS[parts[1]]):
        if parts[2] in names:
            return k
    raise AssertionError(f"{module} is in no sub-layer of sleight.{parts[1]}: add it to TIERS")


TIERED_MODULES = [p for p in ALL_MODULES if _module(p).split(".")[1:2] and _module(p).split(".")[1] in TIERS]


@pytest.mark.parametrize("path", TIERED_MODULES, ids=lambda p: str(p.relative_to(SRC)))
def test_sub_layers_import_only_downwards(path: Path) -> None:
    """Within backends, jury, tamper, readout and cli, a sub-layer imports only its own tier and below."""
    module = _module(path)
    mine = _tier(module)
    if mine is None:
        return
    layer = module.split(".")[1]
    up = sorted(
        m for m in _sleight_imports(path) if m.split(".")[1:2] == [layer] and (t := _tier(m)) is not None and t > mine
    )
    assert not up, f"{path.relative_to(SRC)} (sub-layer {TIERS[layer][mine]}) imports {', '.join(up)} from above it"


def test_every_layer_has_tiers() -> None:
    """Every package directly under sleight with more than a module has a floor plan here."""
    packages = {p.parent.name for p in SRC.glob("*/__init__.py")} - {"data"}  # data: shipped files, no code
    assert packages <= set(TIERS), f"no tiers for {sorted(packages - set(TIERS))}"


def test_no_import_circle_in_sleight() -> None:
    """No module of sleight reaches itself through its imports, lazy ones included (issue #33 item 5)."""
    graph = {_module(p): _sleight_imports(p) for p in ALL_MODULES}
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


def test_registries_import_plainly() -> None:
    """A registry that loads its members with importlib hides them from the checks above."""
    facade = SRC / "readout" / "__init__.py"  # PEP 562: names loaded on first use, above every tier
    bad = [str(p.relative_to(SRC)) for p in ALL_MODULES if p != facade and "import_module(" in p.read_text(encoding="utf-8")]
    assert not bad, f"importlib registries: {bad}"

