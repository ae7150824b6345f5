"""A table's checkpoints and runs as plain values: what :mod:`.config` reads from a YAML file and
what a run kind (:mod:`.kinds`) is handed. Below both, so neither imports the other."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sleight.readout.data.fixtures import fixtures_dir


@dataclass(frozen=True)
class Checkpoint:
    """One model of a table: its folder name, the model spec, a display label, template arguments."""

    name: str
    model: str
    label: str = ""
    chat_template_kwargs: Mapping[str, Any] = field(default_factory=dict)
    group: str | None = None
    revision: str | None = None  # App. A.2's pinned snapshot (abbreviated as printed)
    params_b: float | None = None  # parameters in billions: the plan's memory and time
    generation_config: Mapping[str, Any] = field(default_factory=dict)  # the sampling settings its generation_config sets

    @property
    def shown(self) -> str:
        return self.label or self.name


@dataclass(frozen=True)
class RunSpec:
    """One readout run per checkpoint: ``command`` (a run kind, :mod:`.kinds`), the paper's data spec,
    the shipped fixture's spec, and the command's settings (its config fields)."""

    name: str
    command: str
    paper_data: str
    fixture_data: str
    settings: Mapping[str, Any] = field(default_factory=dict)
    sampling_from: str | None = None  # generation_config: own answers sampled at each checkpoint's settings (App. E)
    items: int | None = None  # the paper's sample size (for the plan; the data spec draws it)

    def fixture_spec(self) -> str:
        return self.fixture_data.replace("{fixtures}", str(fixtures_dir()))
