"""An encoder–decoder checkpoint (T5, Flan-T5, Flan-UL2) read the way App. F of *Scoring the Wrong
Question* reads one: the whole prompt goes to the encoder, and the decoder, reopened from its start
token (``<pad>`` for T5), is teacher-forced through each declared label.

It is not a :class:`~sleight.backends.base.LanguageModel`: there is no running output to tamper with
and no chat template to render, so it answers only what a sequence-mass reading asks -- the decoder's
first next-token distribution and the log-probabilities of target sequences under one encoded input.
The hf engine only (transformers' ``AutoModelForSeq2SeqLM``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from types import MappingProxyType

import numpy as np
import torch

from sleight.backends.hf import _DTYPES, pick_device
from sleight.backends.resolve import ResolvedModel, resolve
from sleight.backends.spec import ModelSpec
from sleight.backends.tokens import HFTokenizerOps
from sleight.errors import UserError


class Seq2SeqModel(HFTokenizerOps):
    """A transformers encoder–decoder model: one encoder pass per input, the decoder teacher-forced
    from its start token through the targets, ``batch_size`` rows per decoder pass."""

    def __init__(
        self, resolved: ResolvedModel, *, device: str | None = None, dtype: str = "float32", threads: int | None = None, batch_size: int = 128
    ) -> None:
        import transformers
        from transformers import AutoConfig, AutoModelForSeq2SeqLM, AutoTokenizer

        if dtype not in _DTYPES:
            raise UserError(f"unknown dtype '{dtype}' (choose from {', '.join(_DTYPES)})")
        self.device = pick_device(device)
        if threads:
            torch.set_num_threads(max(1, int(threads)))  # before the first forward pass sizes torch's pool
        self.resolved = resolved
        self.chat_template_kwargs = MappingProxyType({})
        try:
            config = AutoConfig.from_pretrained(resolved.load_path)
            if not getattr(config, "is_encoder_decoder", False):
                raise UserError(f"model '{resolved.spec}' is not an encoder–decoder checkpoint (its config says {config.model_type})")
            self.tokenizer = AutoTokenizer.from_pretrained(resolved.load_path)
            self.model = AutoModelForSeq2SeqLM.from_pretrained(resolved.load_path, dtype=_DTYPES[dtype])
        except OSError as exc:
            raise UserError(f"could not load model '{resolved.spec}': {exc}") from None
        self.model.to(self.device).eval()
        start = self.model.config.decoder_start_token_id
        if start is None:
            raise UserError(f"model '{resolved.spec}' names no decoder start token (config.decoder_start_token_id)")
        self.start = int(start)
        self.batch_size = max(1, int(batch_size))
        self.info = self.loaded_info(
            resolved, engine="hf", engine_version=f"transformers {transformers.__version__}, torch {torch.__version__}",
            dtype=dtype, device=self.device, batch_size=self.batch_size, threads=torch.get_num_threads(),
        )

    def encode_input(self, text: str) -> list[int]:
        """The encoder's input ids: the text with the tokenizer's own special tokens (T5's closing ``</s>``)."""
        return list(self.tokenizer(text)["input_ids"])

    def encode_target(self, text: str) -> list[int]:
        """A target's decoder ids: the label's own tokens, no end-of-sequence token."""
        return self.encode(text)

    @torch.inference_mode()
    def target_logprobs(self, input_ids: Sequence[int], targets: Sequence[Sequence[int]]) -> tuple[np.ndarray, list[np.ndarray]]:
        """The decoder's first log-distribution over the vocabulary (float64, shape ``(vocab,)``) under
        ``input_ids``, and each target's per-token log-probabilities, the decoder fed its start token
        then the target's own tokens (teacher forcing; the encoder runs once)."""
        if not input_ids or not targets or any(not t for t in targets):
            raise ValueError("an encoder input and non-empty targets are needed")
        enc_ids = torch.tensor([list(input_ids)], dtype=torch.long, device=self.device)
        hidden = self.model.get_encoder()(input_ids=enc_ids).last_hidden_state
        rows: list[torch.Tensor] = []
        for at in range(0, len(targets), self.batch_size):  # --batch-size: decoder rows per pass
            rows.extend(self._decode(hidden, targets[at : at + self.batch_size]))
        first = rows[0][0].numpy().copy()
        per_target = [r[torch.arange(len(t)), torch.tensor(list(t))].numpy().copy() for r, t in zip(rows, targets)]
        return first, per_target

    def _decode(self, hidden: torch.Tensor, targets: Sequence[Sequence[int]]) -> list[torch.Tensor]:
        """One decoder pass over ``targets`` (right-padded) under the encoded input: each row's
        float64 log-distributions, one per position."""
        width = max(len(t) for t in targets)
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else self.start
        dec = torch.full((len(targets), width), pad, dtype=torch.long)
        mask = torch.zeros((len(targets), width), dtype=torch.long)
        for i, t in enumerate(targets):
            row = [self.start, *t[:-1]]
            dec[i, : len(row)] = torch.tensor(row)
            mask[i, : len(row)] = 1
        out = self.model(
            encoder_outputs=(hidden.expand(len(targets), -1, -1),), decoder_input_ids=dec.to(self.device),
            decoder_attention_mask=mask.to(self.device), use_cache=False,
        )
        logp = torch.log_softmax(out.logits.double(), dim=-1).cpu()
        return [logp[i] for i in range(len(targets))]


def load_seq2seq(spec: ModelSpec) -> Seq2SeqModel:
    """An encoder–decoder checkpoint as ``spec`` describes it (the hf engine; its revision, dtype,
    device, threads and batch size), with the spec's load settings recorded as :func:`sleight.backends.load_model`
    records them."""
    from sleight.backends import default_dtype

    if spec.engine != "hf":
        raise UserError(f"model '{spec.model}': an encoder–decoder checkpoint is read on the hf engine only (got --engine {spec.engine})")
    if spec.chat_template_kwargs:  # nothing here renders a chat template: refused, not ignored
        raise UserError(f"model '{spec.model}': an encoder–decoder checkpoint has no chat template (--chat-template-kwargs/--thinking do not apply)")
    model = Seq2SeqModel(
        resolve(spec.model, spec.revision), device=spec.device, dtype=spec.dtype or default_dtype("hf"), threads=spec.threads, batch_size=spec.batch_size
    )
    model.info = replace(model.info, load=spec.load_record())
    return model


def is_encoder_decoder(spec: ModelSpec) -> bool:
    """Whether ``spec.model``'s config (its folder's, the shipped architecture table's, or the hub
    cache's at the spec's revision) describes an encoder–decoder model; False where none can be read
    (the decoder-only loader then says what is wrong)."""
    from sleight.backends.architectures import architecture

    arch = architecture(spec.model)
    if arch is not None:
        return bool(arch.config.get("is_encoder_decoder"))
    try:
        from transformers import AutoConfig

        return bool(getattr(AutoConfig.from_pretrained(resolve(spec.model, spec.revision).load_path), "is_encoder_decoder", False))
    except (OSError, ValueError, UserError):
        return False
