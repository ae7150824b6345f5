"""Label-slot votes: a local juror's vote read from its own next-token distribution.

For every field the judge prompt is rendered with the vote's JSON opened in the assistant turn up to
that field's value (``{"flagged":``, ending before the space), and the field's options (`` true`` /
`` false``) are scored there in context, with the prefix condition checked, through the one reading
of a scored position every instrument uses (:func:`sleight.position.read_positions`; on vLLM that is
its token-id log-probs, never a vocabulary dump). Fields are independent, so every slot of a batch
goes in one call, and where the engine forks (hf) each case is read once and its slots' few tokens
are read from that reading's cache. The vote is the argmax per field; the renormalised probabilities are kept as a
soft vote, and the options' mass at each slot is recorded: a juror whose slots hold little mass is
being read where it was about to write something else (the readout audit applied to the jury).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from sleight.backends.chat import Messages
from sleight.jury.ballot import Ballot, Field
from sleight.jury.cast import Cast
from sleight.position import OptionSetReading, read_positions, renormalise

SLOTS = "slots"
MASS_FLOOR = 0.5


def slot_contexts(model: Any, conversations: Sequence[Messages], ballot: Ballot) -> tuple[list[str], list[list[list[str]]]]:
    """The rendered contexts (one per conversation and field, conversation-major) and their option sets."""
    contexts: list[str] = []
    sets: list[list[list[str]]] = []
    for msgs in conversations:
        for f in ballot.fields:
            contexts.append(model.render_chat([dict(m) for m in msgs], prefill=ballot.slot_prefix(f)).text)
            sets.append([list(ballot.slot_options(f))])
    return contexts, sets


def slot_cast(ballot: Ballot, readings: Sequence[OptionSetReading], latency_s: float = 0.0) -> Cast:
    """The vote one conversation's slot readings give (pure): argmax per field, or an abstention
    naming the fields whose slot could not be read (boundary merged, options sharing a first token)."""
    values: dict[str, bool | str] = {}
    soft: dict[str, tuple[float, ...] | None] = {}
    mass: dict[str, float | None] = {}
    bad: list[str] = []
    notes: list[str] = []
    for f, r in zip(ballot.fields, readings):
        mass[f.name] = r.mass
        probs = renormalise(r.first_logprobs) if r.distinct else None
        if probs is None:
            soft[f.name] = None
            bad.append(f"{f.name}: " + ("boundary not preserved" if not r.boundary_preserved else "options share a first token"))
            continue
        soft[f.name] = tuple(float(p) for p in probs)
        values[f.name] = f.values[int(np.argmax(probs))]
        notes.append(_note(f, probs, r.mass))
    if bad:
        return Cast(values=None, path=SLOTS, raw_reply="slots unreadable: " + "; ".join(bad), latency_s=latency_s, soft=soft, mass=mass)
    return Cast(values=values, path=SLOTS, reason="", raw_reply="; ".join(notes), latency_s=latency_s, soft=soft, mass=mass)


def _note(f: Field, probs: np.ndarray, mass: float | None) -> str:
    m = "—" if mass is None else f"{mass:.3f}"
    if f.boolean:
        return f"{f.name}: P(true) {probs[0]:.3f}, slot mass {m}"
    best = int(np.argmax(probs))
    return f"{f.name}: {f.values[best]} P {probs[best]:.3f}, slot mass {m}"


def slot_casts(model: Any, conversations: Sequence[Messages], ballot: Ballot, *, top_k: int = 20, fork: bool = True) -> list[Cast]:
    """Slot votes for a batch of conversations, every slot in one :func:`read_positions` call
    (``fork=False``: every slot's context read whole, the reference the forked reading must equal)."""
    if not conversations:
        return []
    contexts, sets = slot_contexts(model, conversations, ballot)
    start = time.perf_counter()
    readings = read_positions(model, contexts, sets, top_k=top_k, forks=len(ballot.fields) if fork else 1)  # a vote's slots fork from its case
    each = (time.perf_counter() - start) / len(conversations)
    k = len(ballot.fields)
    return [slot_cast(ballot, [readings[i * k + j].option_sets[0] for j in range(k)], each) for i in range(len(conversations))]
