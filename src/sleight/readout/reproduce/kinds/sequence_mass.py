"""``sequence-mass`` runs: App. F's decoder sequence masses -- a completion preset's declared labels
read as whole sequences on the paper's RACE-H items (:mod:`sleight.readout.scan.sequence_mass`).

An encoder–decoder checkpoint (its config says ``is_encoder_decoder``: Flan-UL2, Flan-T5) loads as
one (:func:`sleight.backends.seq2seq.load_seq2seq`), the decoder reopened from ``<pad>``; any other
checkpoint is the run's shared decoder-only model, each label read after the prompt. One pass into a
run directory of its own, its identity the items, the preset and the model's load record.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pyarrow as pa

from sleight import rundir
from sleight.readout.reproduce.kinds.base import Rows, RunContext, RunKind, single_pass

KIND = "sequence-mass"
SCHEMA = pa.schema(
    [("preset", pa.string()), ("item_id", pa.string()), ("mass", pa.float64()), ("mass_spaced", pa.float64())]
    + [(k, pa.bool_()) for k in ("argmax_option", "targets_identical", "encoder_decoder")]
)


def sequence_mass_rows(ctx: RunContext) -> Rows:
    """Every item's sequence masses on this checkpoint (resumed, or refused when changed, as a run directory)."""
    from sleight.backends.seq2seq import is_encoder_decoder, load_seq2seq
    from sleight.readout.scan.run import ScanConfig, preset_records
    from sleight.readout.scan.scorers import get_scorer, scorer_items
    from sleight.readout.scan.sequence_mass import DecoderOnlyReader, EncoderDecoderReader, SequenceReader, read_item

    preset = str(ctx.spec.settings["preset"])
    records = preset_records(get_scorer(preset), ScanConfig(presets=(preset,), data=ctx.data))
    items = scorer_items(preset, records, limit=ctx.limit)
    seq2seq = is_encoder_decoder(ctx.model_spec)
    readers: list[SequenceReader] = []

    def reader() -> SequenceReader:
        if not readers:
            readers.append(EncoderDecoderReader(load_seq2seq(ctx.model_spec)) if seq2seq else DecoderOnlyReader(ctx.model()))
        return readers[0]

    config = {"data": ctx.data, "limit": ctx.limit, "items_sha256": rundir.digest(records), "preset": preset, "encoder_decoder": seq2seq}

    def compute() -> Rows:
        r = reader()
        return [read_item(r, preset, item).as_row() for item in items]

    return single_pass(ctx, KIND, config, SCHEMA, len(items), compute, model_info=lambda: reader().info.as_dict())


def _values() -> dict[str, tuple[str, ...]]:
    from sleight.readout.scan.scorers import SCORERS

    return {"preset": tuple(SCORERS)}


def _check(s: Mapping[str, Any]) -> str | None:
    from sleight.readout.scan.scorers import get_scorer

    preset = s.get("preset")
    if preset not in _values()["preset"]:
        return f"preset: {preset!r} not among {', '.join(_values()['preset'])}"
    p = get_scorer(str(preset))
    if p.rendering != "completion" or len(p.options) < 2:
        return f"preset: {preset} is not a completion prompt with declared labels (sequence masses read completion presets)"
    return None


KINDS = (
    RunKind(
        KIND,
        fields=lambda: ("preset",),
        columns=lambda: tuple(SCHEMA.names),
        values=_values,
        families=lambda _s: ("race-h",),
        per_item=lambda _s: (2, 0),  # the labels as declared and spaced, each one batch after the prompt
        rows=sequence_mass_rows,
        check=_check,
        target="mass",
        pair=("preset", "item_id"),
        context_tokens=600,
    ),
)
