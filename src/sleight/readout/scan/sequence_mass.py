"""App. F's decoder sequence mass: how much probability a model gives the declared labels as whole
sequences at the scored position, summed over the labels -- the quantity App. F prints for Zhuang et
al.'s Flan-UL2 and the Flan-T5-XL/XXL comparators, a different one from Table 11's first-token mass.

Two readers serve it, one per model family:

- an encoder–decoder checkpoint (:class:`EncoderDecoderReader`): the completion prompt goes to the
  encoder and the decoder is reopened from its start token (``<pad>``), each label encoded alone;
- a decoder-only checkpoint (:class:`DecoderOnlyReader`): each label encoded as a continuation of
  the prompt (the boundary rule of :func:`sleight.position.encode_continuation`) and read after it.

Per item: the mass as declared and with each label written with a leading space, whether the first
position's unrestricted argmax is a label's first token, and whether the bare and space-prefixed
labels are the same tokens (App. F: they are for the Flan vocabularies).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Protocol

import numpy as np

from sleight.backends.base import LanguageModel, ModelInfo
from sleight.errors import UserError
from sleight.position import encode_continuation
from sleight.readout.audit.items import AuditItem
from sleight.readout.audit.variants import VariantSpec, make_variant, render

if TYPE_CHECKING:
    from sleight.backends.seq2seq import Seq2SeqModel  # loads torch: typed here, imported by the caller


class SequenceReader(Protocol):
    """What a sequence-mass reading asks of a model."""

    encoder_decoder: bool

    @property
    def info(self) -> ModelInfo:
        """The loaded model's record (what the run directory keeps and compares)."""

    def targets(self, context: str, label: str) -> list[int] | None:
        """The label's token ids as the model scores them after ``context`` (None: no boundary)."""

    def read(self, context: str, targets: Sequence[Sequence[int]]) -> tuple[int, list[np.ndarray]]:
        """The unrestricted argmax at the scored position, and each target's per-token log-probs."""


class EncoderDecoderReader:
    """An encoder–decoder checkpoint: the prompt encoded (with its closing ``</s>``), each label alone."""

    encoder_decoder = True

    def __init__(self, model: Seq2SeqModel) -> None:
        self.model = model

    @property
    def info(self) -> ModelInfo:
        return self.model.info

    def targets(self, context: str, label: str) -> list[int] | None:
        return self.model.encode_target(label) or None

    def read(self, context: str, targets: Sequence[Sequence[int]]) -> tuple[int, list[np.ndarray]]:
        first, per_target = self.model.target_logprobs(self.model.encode_input(context), targets)
        return int(np.argmax(first)), per_target


class DecoderOnlyReader:
    """A decoder-only checkpoint: each label a continuation of the prompt, read after it."""

    encoder_decoder = False

    def __init__(self, model: LanguageModel) -> None:
        self.model = model

    @property
    def info(self) -> ModelInfo:
        return self.model.info

    def targets(self, context: str, label: str) -> list[int] | None:
        return encode_continuation(self.model, context, label)

    def read(self, context: str, targets: Sequence[Sequence[int]]) -> tuple[int, list[np.ndarray]]:
        ids = self.model.encode(context)
        top = self.model.read_next([ids], [[]], top_k=1)[0]
        return int(top.top_ids[0]), [np.asarray(lp, dtype=np.float64) for lp in self.model.continuation_logprobs(ids, targets)]


@dataclass(frozen=True)
class SequenceMassRow:
    """One item's reading (``mass``/``mass_spaced`` None where some label loses its boundary)."""

    preset: str
    item_id: str
    mass: float | None
    mass_spaced: float | None
    argmax_option: bool
    targets_identical: bool
    encoder_decoder: bool

    def as_row(self) -> dict[str, object]:
        return asdict(self)


def sequence_mass(logprobs: Sequence[np.ndarray]) -> float:
    """The labels' summed sequence probabilities: sum over labels of exp(sum of the label's token log-probs)."""
    return float(sum(np.exp(float(np.sum(lp))) for lp in logprobs))


def context_text(item: AuditItem) -> str:
    """The completion prompt of a preset's item as the encoder (or the decoder-only model) reads it."""
    if item.chat_template:
        raise UserError(f"item {item.id}: sequence masses read completion presets only (this one renders a chat template)")
    spec = make_variant(item, "original")
    assert isinstance(spec, VariantSpec)  # the original variant always exists
    return render(None, spec)  # no chat template: render reads no model


def read_item(reader: SequenceReader, preset: str, item: AuditItem) -> SequenceMassRow:
    """One item's sequence masses (declared and space-prefixed labels), argmax and target identity."""
    labels = list(item.options or ())
    if len(labels) < 2:
        raise UserError(f"item {item.id}: sequence masses need at least two declared labels")
    context = context_text(item)
    bare = [reader.targets(context, o) for o in labels]
    spaced = [reader.targets(context, " " + o.lstrip()) for o in labels]
    identical = all(b is not None and b == s for b, s in zip(bare, spaced))
    argmax, mass = -1, None
    if all(b for b in bare):
        argmax, lps = reader.read(context, [b for b in bare if b])
        mass = sequence_mass(lps)
    if identical:
        mass_spaced = mass
    elif all(s for s in spaced):
        spaced_argmax, lps = reader.read(context, [s for s in spaced if s])
        argmax = spaced_argmax if argmax < 0 else argmax
        mass_spaced = sequence_mass(lps)
    else:
        mass_spaced = None
    firsts = {b[0] for b in bare if b}
    return SequenceMassRow(preset, item.id, mass, mass_spaced, argmax in firsts, identical, reader.encoder_decoder)
