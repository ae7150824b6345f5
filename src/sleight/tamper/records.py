"""The stored shape of a run: Arrow schemas of ``clean.parquet`` / ``trials.parquet`` and their rows.

These column names are the public schema (documented in the README); readers depend on them.
Per-token lists are aligned with ``token_ids``; surprisal and entropies are null at injected steps.
Under the study's conventions a reply the model ended holds its end-of-turn token as its last token
(with its records, in every mean); the ``reply`` text leaves it out.
Top-k log-probs are stored as float16 (SPEC §6: bytes per trial), everything else as float32/64.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pyarrow as pa

from sleight.tamper.engine import Clean, Reply, TamperConfig, Trial
from sleight.tamper.signals import entropy_returned, entropy_top, mask_injected, swap_runs, trial_deltas

_I32 = pa.list_(pa.int32())
_F32 = pa.list_(pa.float32())

TOKEN_FIELDS = [
    pa.field("token_ids", _I32),
    pa.field("logprobs", _F32),  # the model's log-prob of every token, injected ones included
    pa.field("surprisal", _F32),
    pa.field("entropy_top20", _F32),
    pa.field("entropy_full", _F32),
    pa.field("top20_ids", pa.list_(_I32)),
    pa.field("top20_logprobs", pa.list_(pa.list_(pa.float16()))),
]

CLEAN_SCHEMA = pa.schema(
    [
        pa.field("model", pa.string()),
        pa.field("question_index", pa.int32()),
        pa.field("question_id", pa.string()),
        pa.field("question", pa.string()),
        pa.field("trigger", pa.string()),
        pa.field("rendered_prompt", pa.string()),
        pa.field("reply", pa.string()),
        pa.field("n_tokens", pa.int32()),
        pa.field("finish_reason", pa.string()),
        pa.field("n_triggers", pa.int32()),
        pa.field("trigger_steps", _I32),  # first token of each trigger in the clean reply
        pa.field("trigger_ends", _I32),  # one past its last token
        *TOKEN_FIELDS,
    ]
)

DELTA_COLUMNS = [
    "delta_surprisal",
    "delta_entropy",
    "delta_surprisal_matched",
    "delta_entropy_matched",
    "delta_entropy_full",
    "delta_entropy_full_matched",
]

TRIALS_SCHEMA = pa.schema(
    [
        pa.field("model", pa.string()),
        pa.field("question_index", pa.int32()),
        pa.field("question_id", pa.string()),
        pa.field("question", pa.string()),
        pa.field("trigger", pa.string()),
        pa.field("substitute_index", pa.int32()),
        pa.field("substitute", pa.string()),
        pa.field("is_entity", pa.bool_()),
        pa.field("untouched", pa.bool_()),
        pa.field("reply", pa.string()),
        pa.field("n_tokens", pa.int32()),
        pa.field("finish_reason", pa.string()),
        pa.field("n_swaps", pa.int32()),
        pa.field("swap_steps", _I32),
        pa.field("swap_ids", pa.list_(_I32)),
        pa.field("n_substitutions", pa.int32()),
        pa.field("n_fallbacks", pa.int32()),
        pa.field("injected", pa.list_(pa.bool_())),
        *TOKEN_FIELDS,
        *[pa.field(c, pa.float64()) for c in DELTA_COLUMNS],
    ]
)


def _list_array(arrays: Sequence[np.ndarray], typ: pa.DataType, nan_is_null: bool = False) -> pa.Array:
    """list<typ> from one numpy array per row (NaN -> null when asked)."""
    offsets = np.concatenate([[0], np.cumsum([len(a) for a in arrays])]).astype(np.int32)
    flat = np.concatenate([np.asarray(a) for a in arrays]) if arrays else np.zeros(0)
    np_type = typ.to_pandas_dtype()
    values = pa.array(flat.astype(np_type, copy=False), type=typ, mask=np.isnan(flat) if nan_is_null else None)
    return pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), values)


def _nested_array(arrays: Sequence[np.ndarray], typ: pa.DataType) -> pa.Array:
    """list<list<typ>> from one (n, k) numpy array per row."""
    rows = [np.asarray(a).reshape(len(a), -1) for a in arrays]
    flat = np.concatenate([r.reshape(-1) for r in rows]) if rows else np.zeros(0)
    inner_lens = np.concatenate([np.full(r.shape[0], r.shape[1]) for r in rows]) if rows else np.zeros(0)
    inner = pa.ListArray.from_arrays(
        pa.array(np.concatenate([[0], np.cumsum(inner_lens)]).astype(np.int32), pa.int32()),
        pa.array(flat.astype(typ.to_pandas_dtype(), copy=False), type=typ),
    )
    outer = np.concatenate([[0], np.cumsum([r.shape[0] for r in rows])]).astype(np.int32)
    return pa.ListArray.from_arrays(pa.array(outer, pa.int32()), inner)


def entropy_top20(reply: Reply, config: TamperConfig) -> np.ndarray:
    """The ``entropy_top20`` values of a reply under ``config``'s conventions (unmasked)."""
    if config.study:
        return entropy_returned(reply.top_ids, reply.top_logprobs, reply.token_ids, reply.logprobs)
    return entropy_top(reply.top_logprobs)


def reply_signals(reply: Reply, config: TamperConfig) -> dict[str, np.ndarray]:
    """Per-token surprisal and entropies (unmasked), by signal name."""
    return {"surprisal": -reply.logprobs, "entropy_top20": entropy_top20(reply, config), "entropy_full": np.asarray(reply.entropy, dtype=np.float64)}


def trial_swaps(trial: Trial, config: TamperConfig) -> list[tuple[int, int]]:
    """``(start, end)`` of each swap: one per substitution (study, as its ``sub_indices``) or one
    per maximal run of injected tokens (sleight)."""
    if config.study:
        return [(s.step, s.step + len(s.ids)) for s in trial.substitutions if s.ids]
    return swap_runs(trial.reply.injected)


def _token_columns(replies: Sequence[Reply], config: TamperConfig) -> dict[str, pa.Array]:
    inj = [r.injected for r in replies]
    return {
        "token_ids": _list_array([np.asarray(r.token_ids, dtype=np.int64) for r in replies], pa.int32()),
        "logprobs": _list_array([r.logprobs for r in replies], pa.float32()),
        "surprisal": _list_array([mask_injected(-r.logprobs, i) for r, i in zip(replies, inj)], pa.float32(), True),
        "entropy_top20": _list_array([mask_injected(entropy_top20(r, config), i) for r, i in zip(replies, inj)], pa.float32(), True),
        "entropy_full": _list_array([mask_injected(r.entropy, i) for r, i in zip(replies, inj)], pa.float32(), True),
        "top20_ids": _nested_array([r.top_ids for r in replies], pa.int32()),
        "top20_logprobs": _nested_array([r.top_logprobs for r in replies], pa.float16()),
    }


def clean_table(
    model_name: str, question_index: int, question_id: str, question: str, clean: Clean, config: TamperConfig, decode: Callable[[Sequence[int]], str]
) -> pa.Table:
    """One row: the clean run of a question."""
    r = clean.reply
    cols = {
        "model": pa.array([model_name]),
        "question_index": pa.array([question_index], pa.int32()),
        "question_id": pa.array([question_id]),
        "question": pa.array([question]),
        "trigger": pa.array([config.trigger]),
        "rendered_prompt": pa.array([clean.rendered.text]),
        "reply": pa.array([decode(r.text_ids)]),
        "n_tokens": pa.array([len(r.token_ids)], pa.int32()),
        "finish_reason": pa.array([r.finish_reason]),
        "n_triggers": pa.array([len(clean.triggers)], pa.int32()),
        "trigger_steps": pa.array([[t.start for t in clean.triggers]], _I32),
        "trigger_ends": pa.array([[t.end for t in clean.triggers]], _I32),
        **_token_columns([r], config),
    }
    return pa.table(cols, schema=CLEAN_SCHEMA)


def clean_signals(clean: Clean, config: TamperConfig) -> dict[str, np.ndarray]:
    return reply_signals(clean.reply, config)


def trials_table(
    model_name: str,
    question_index: int,
    question_id: str,
    question: str,
    clean: Clean,
    trials: Sequence[Trial],
    config: TamperConfig,
    decode: Callable[[Sequence[int]], str],
    entity_index: int | None = 0,
) -> pa.Table:
    """One row per trial of a question, with its swaps and Δ signals."""
    base = clean_signals(clean, config)
    starts = [t.start for t in clean.triggers]
    ends = [t.end for t in clean.triggers]
    runs = [trial_swaps(t, config) for t in trials]
    deltas = []
    for t, rs in zip(trials, runs):
        r = t.reply
        deltas.append(trial_deltas(reply_signals(r, config), r.injected, [a for a, _ in rs], base, starts, ends, config.window))
    n = len(trials)
    cols = {
        "model": pa.array([model_name] * n),
        "question_index": pa.array([question_index] * n, pa.int32()),
        "question_id": pa.array([question_id] * n),
        "question": pa.array([question] * n),
        "trigger": pa.array([config.trigger] * n),
        "substitute_index": pa.array([t.substitute_index for t in trials], pa.int32()),
        "substitute": pa.array([t.substitute for t in trials]),
        "is_entity": pa.array([entity_index is not None and t.substitute_index == entity_index for t in trials]),
        "untouched": pa.array([t.untouched for t in trials]),
        "reply": pa.array([decode(t.reply.text_ids) for t in trials]),
        "n_tokens": pa.array([len(t.reply.token_ids) for t in trials], pa.int32()),
        "finish_reason": pa.array([t.reply.finish_reason for t in trials]),
        "n_swaps": pa.array([len(rs) for rs in runs], pa.int32()),
        "swap_steps": pa.array([[a for a, _ in rs] for rs in runs], _I32),
        "swap_ids": pa.array([[t.reply.token_ids[a:b] for a, b in rs] for t, rs in zip(trials, runs)], pa.list_(_I32)),
        "n_substitutions": pa.array([len(t.substitutions) for t in trials], pa.int32()),
        "n_fallbacks": pa.array([sum(s.fallback for s in t.substitutions) for t in trials], pa.int32()),
        "injected": pa.array([t.reply.injected.tolist() for t in trials], pa.list_(pa.bool_())),
        **_token_columns([t.reply for t in trials], config),
        **{c: pa.array([d[c] for d in deltas], pa.float64()) for c in DELTA_COLUMNS},
    }
    return pa.table(cols, schema=TRIALS_SCHEMA)
