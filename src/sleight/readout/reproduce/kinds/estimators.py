"""``estimators`` runs: ``readout estimators``' own run directory
(:func:`~sleight.readout.ptrue.estimators.run_estimators_dir`): lm-polygraph's single-answer
estimators beside the P(True) readouts on the same own answers (App. E), resumed chunk by chunk."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from sleight.readout.reproduce.kinds.base import Rows, RunContext, RunKind, setting_int

if TYPE_CHECKING:
    from sleight.readout.ptrue.answers import Sampling

FIELDS = ("max_new_tokens", "samples", "instruct", "decode", "temperature", "top_k", "top_p", "sample_seed")


def estimator_rows(ctx: RunContext) -> Rows:
    from sleight.readout.data import qa_items
    from sleight.readout.ptrue.estimators import run_estimators_dir

    s = ctx.run_settings  # a run sampling at each checkpoint's generation_config (App. E) gains its settings here
    _ds, items = qa_items(ctx.data, ctx.limit)
    result = run_estimators_dir(
        ctx.model, items, ctx.run_dir, instruct=bool(s.get("instruct", True)), max_new_tokens=setting_int(s, "max_new_tokens", 32),
        samples=setting_int(s, "samples", 10), source=ctx.data, answer_sampling=answer_sampling_of(s), B=ctx.B, seed=ctx.seed,
    )
    return [dict(r) for r in result.readings]


def answer_sampling_of(s: Mapping[str, Any]) -> Sampling | None:
    """The answers' draw a run's settings name (None: greedy), one line on a bad setting."""
    from sleight.readout.ptrue.answers import answer_sampling

    return answer_sampling(str(s.get("decode", "greedy")), s.get("temperature"), s.get("top_k"), s.get("top_p"), s.get("sample_seed"))


def _check(s: Mapping[str, Any]) -> str | None:
    from sleight.errors import UserError

    try:
        answer_sampling_of(s)
    except (UserError, TypeError, ValueError) as exc:
        return str(exc)
    return None


def _columns() -> tuple[str, ...]:
    from sleight.readout.ptrue.estimators import ESTIMATOR_SCHEMA

    return tuple(ESTIMATOR_SCHEMA.names)


def _values() -> dict[str, tuple[str, ...]]:
    from sleight.readout.ptrue.readouts import READOUT_LABELS
    from sleight.readout.ptrue.uncertainty import ESTIMATOR_COLUMNS

    return {"scorer": (*ESTIMATOR_COLUMNS, *(f"ptrue_{k}" for k in READOUT_LABELS))}


def _per_item(s: Mapping[str, Any]) -> tuple[int, int]:
    n = setting_int(s, "samples", 10)
    tokens = setting_int(s, "max_new_tokens", 32)
    return 2 + n + 6 + 2, (1 + n) * tokens  # the answer, its distributions, the samples, the P(True) contexts, two attention passes


KINDS = (
    RunKind(
        "estimators",
        fields=lambda: FIELDS,
        columns=_columns,
        values=_values,
        families=lambda _s: ("triviaqa", "mmlu"),
        per_item=_per_item,
        rows=estimator_rows,
        check=_check,
        target="label",
        context_tokens=500,
    ),
)
