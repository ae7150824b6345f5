"""``forecast`` and ``ptrue`` runs: the readout commands' own downstream runs
(:func:`~sleight.readout.downstream_run.run_downstream`), resumed as the commands resume them."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from sleight.readout.reproduce.kinds.base import Rows, RunContext, RunKind, setting_int

_BASE = {"model", "engine", "dtype", "items", "data", "limit", "B", "seed", "chunk"}


def _fields(command: str) -> tuple[str, ...]:
    from sleight.readout.downstream_run import ForecastConfig, PTrueConfig

    cls = ForecastConfig if command == "forecast" else PTrueConfig
    return tuple(f.name for f in dataclasses.fields(cls) if f.name not in _BASE)


def downstream_rows(command: str, ctx: RunContext) -> Rows:
    from sleight.readout.downstream_run import ForecastConfig, PTrueConfig, run_downstream

    cls: type[ForecastConfig] | type[PTrueConfig] = ForecastConfig if command == "forecast" else PTrueConfig
    s = ctx.model_spec
    config = cls(
        model=ctx.checkpoint.model,
        engine=s.engine,
        dtype=s.dtype,
        data=ctx.data,
        limit=ctx.limit,
        B=ctx.B,
        seed=ctx.seed,
        **ctx.run_settings,
    )
    return [dict(r) for r in run_downstream(config, ctx.run_dir, load_model=ctx.model, progress=ctx.progress).rows]


def forecast_per_item(s: Mapping[str, Any]) -> tuple[int, int]:
    # the note (App. H's writer: cap 256 tokens an attempt; its first attempt counted, the up to four
    # retries not), the reader, the forecast at two positions, readout (f)
    return 4, setting_int(s, "note_tokens", 256) + setting_int(s, "continuation_tokens", 48)


def _ptrue_per_item(s: Mapping[str, Any]) -> tuple[int, int]:
    answers = 1 + setting_int(s, "max_new_tokens", 32)
    contexts = 3 * (2 if s.get("answers", "both") == "both" else 1)  # the prompt, the stemmed prompt, the deleted prompt
    return 1 + contexts, answers + contexts * setting_int(s, "continuation_tokens", 16)


def _forecast_columns() -> tuple[str, ...]:
    from sleight.readout.downstream_run import FORECAST_SCHEMA

    return tuple(FORECAST_SCHEMA.names)


def _ptrue_columns() -> tuple[str, ...]:
    from sleight.readout.downstream_run import PTRUE_SCHEMA

    return tuple(PTRUE_SCHEMA.names)


def _forecast_values() -> dict[str, tuple[str, ...]]:
    from sleight.readout.forecast.pipeline import POSITIONS

    return {"position": tuple(POSITIONS)}


def _ptrue_values() -> dict[str, tuple[str, ...]]:
    from sleight.readout.ptrue.pipeline import SETTINGS
    from sleight.readout.ptrue.readouts import READOUT_NAMES

    return {"setting": tuple(SETTINGS), "readout": tuple(READOUT_NAMES), "answer_source": ("own", "gold", "wrong")}


KINDS = (
    RunKind(
        "forecast",
        fields=lambda: _fields("forecast"),
        columns=_forecast_columns,
        values=_forecast_values,
        families=lambda _s: ("race-h",),
        per_item=forecast_per_item,
        rows=lambda ctx: downstream_rows("forecast", ctx),
        target="correct",
        unit="cluster",
        pair=("item_id",),
        context_tokens=600,
    ),
    RunKind(
        "ptrue",
        fields=lambda: _fields("ptrue"),
        columns=_ptrue_columns,
        values=_ptrue_values,
        families=lambda _s: ("race-h", "mmlu", "triviaqa"),
        per_item=_ptrue_per_item,
        rows=lambda ctx: downstream_rows("ptrue", ctx),
        target="label",
        unit="item_id",
        pair=("setting", "item_id", "answer_source"),
        context_tokens=500,
    ),
)
