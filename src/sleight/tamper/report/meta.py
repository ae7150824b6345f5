"""What the report knows about each model beyond its run: the name the paper prints, whether it can
think, its sizes (total and active parameters), and the matched thinking pairs (Table 1's marks, the
size statistic, §5 "The thinking factor").

A small typed input, built from a sweep file (``tamper report --config FILE|study``) or by hand.
Without it the report names each model by its run and marks none.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sleight.errors import UserError


@dataclass(frozen=True)
class ModelMeta:
    """One model as the paper's tables show it."""

    display: str  # e.g. "Qwen2.5-72B (AWQ)"
    thinking_capable: bool = False  # a native reasoning-trace mode (Table 1's shaded rows)
    params_b: float | None = None  # billions of parameters (the size statistic)
    active_params_b: float | None = None  # billions read per token (MoE, Gemma's E-models); None: dense


@dataclass(frozen=True)
class ReportMeta:
    """Per-model metadata by run name (a sweep subject's name, which is its run folder), other names
    for a model (``aliases``: the model spec its run used -> its run name), and the matched pairs
    (thinking model, its non-thinking sibling) by run name."""

    models: Mapping[str, ModelMeta] = field(default_factory=dict)
    pairs: tuple[tuple[str, str], ...] = ()
    aliases: Mapping[str, str] = field(default_factory=dict)

    def lookup(self, keys: tuple[str, ...]) -> tuple[str, ModelMeta] | None:
        """The run name and metadata of the first of ``keys`` (a run's folder name, its model spec)
        that names a model, or ``None``."""
        for k in keys:
            name = k if k in self.models else self.aliases.get(k)
            if name is not None:
                return name, self.models[name]
        return None


def meta_from_config(spec: str | Path) -> ReportMeta:
    """The metadata of a sweep file's subjects (:func:`sleight.tamper.sweep.config.load_config`):
    each subject by its name and by its model spec."""
    try:
        from sleight.tamper.sweep.config import load_config
    except ImportError as exc:  # the sweep's config module is what reads the file
        raise UserError(f"--config {spec}: this install cannot read sweep files ({exc})") from None
    return meta_of(load_config(spec))


def meta_of(config: Any) -> ReportMeta:
    """The metadata of a loaded sweep config (a ``SweepConfig``): each subject by its name, its
    model spec as an alias, and the config's pairs (what ``tamper sweep`` hands its report)."""
    models = {m.name: ModelMeta(m.display or m.name, m.thinking_capable, m.params_b, m.active_params_b) for m in config.subjects}
    aliases = {m.model: m.name for m in config.subjects if m.model not in models}
    return ReportMeta(models, tuple(config.pairs), aliases)
