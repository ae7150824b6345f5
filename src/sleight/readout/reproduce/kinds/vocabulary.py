"""``vocabulary`` runs: App. C.6 -- whether a declared set keeps distinct first tokens after the scored
context, read from the checkpoint's tokenizer alone (no weights load, no forward pass).

The contexts are Table 3's production prompts (App. I's C0: the fixed note, the original ending),
rendered by the tokenizer's own chat template with the generation prompt (the model layer's rendering
rule, :class:`sleight.backends.tokens.HFTokenizerOps`), or the raw prompt where the tokenizer has no
template. Each option is encoded as a continuation of each context (the boundary rule of
:func:`sleight.position.encode_in_context`). One row per declared set: on how many contexts the
boundary holds and the options' first tokens are pairwise distinct, whether that holds on every
context, and whether C.6's rule -- distinct first tokens predicted whenever the characters after the
separator differ -- clears the set falsely or alarms falsely. The rows are a run directory's
``readings.parquet``, its identity the inputs they were read from (the tokenizer, its revision, the sets).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import Any

import pyarrow as pa

from sleight import rundir
from sleight.backends.spec import ModelSpec
from sleight.backends.tokens import HFTokenizerOps
from sleight.readout.reproduce.kinds.base import Rows, RunContext, RunKind, single_pass

KIND = "vocabulary"
SCHEMA = pa.schema(
    [("set", pa.string()), ("options", pa.string())]
    + [(k, pa.int64()) for k in ("contexts", "boundary_contexts", "distinct_contexts")]
    + [(k, pa.float64()) for k in ("distinct", "rule_distinct", "false_clearance", "false_alarm")]
)


class TokenizerOnly(HFTokenizerOps):
    """A checkpoint's tokenizer and chat template with the model layer's encoding and rendering rule,
    and nothing else: C.6 needs no weights."""

    def __init__(self, tokenizer: Any, spec: str, chat_template_kwargs: Mapping[str, object]) -> None:
        self.tokenizer = tokenizer
        self.spec = spec
        self.chat_template_kwargs = MappingProxyType(dict(chat_template_kwargs))


def load_tokenizer(spec: ModelSpec) -> TokenizerOnly:
    """The tokenizer of ``spec.model``: a hub checkpoint's own tokenizer files at ``spec.revision`` (no
    weights), else the folder a bundled model, GGUF file or folder resolves to. One line when it
    cannot be read."""
    from transformers import AutoTokenizer

    from sleight.backends.resolve import resolve
    from sleight.backends.spec import hub_id
    from sleight.errors import UserError

    try:
        where = spec.model if hub_id(spec.model) else resolve(spec.model).load_path
        tok = AutoTokenizer.from_pretrained(where, revision=spec.revision)
    except (OSError, ValueError) as exc:
        raise UserError(f"could not read the tokenizer of '{spec.model}': {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from None
    return TokenizerOnly(tok, spec.model, spec.chat_template_kwargs)


def contexts(tokens: TokenizerOnly, items: Sequence[Any]) -> list[str]:
    """Each item's production prompt as the checkpoint renders it (its original variant), or the raw
    prompt where the tokenizer has no chat template."""
    from sleight.readout.audit.variants import VariantSpec, make_variant, render

    out = []
    for item in items:
        spec = make_variant(item, "original")
        assert isinstance(spec, VariantSpec)  # the original variant always exists
        out.append(render(tokens, spec if tokens.chat_template else dataclasses.replace(spec, chat_template=False)))
    return out


def rule_distinct(options: Sequence[str]) -> bool:
    """C.6's rule: distinct first tokens predicted when the first characters after the separator differ."""
    firsts = [o.lstrip()[:1] for o in options]
    return len(set(firsts)) == len(firsts)


def set_row(name: str, options: Sequence[str], texts: Sequence[str], encode: Callable[[str], list[int]]) -> dict[str, Any]:
    """One declared set over every context: how often the boundary holds and the first tokens are distinct."""
    from sleight.position import encode_in_context

    boundary = distinct = 0
    for text in texts:
        ids = [encode_in_context(encode, text, o) for o in options]
        if all(i for i in ids):
            boundary += 1
            firsts = [i[0] for i in ids if i]
            distinct += len(set(firsts)) == len(firsts)
    every = bool(texts) and distinct == len(texts)
    rule = rule_distinct(options)
    return {
        "set": name, "options": json.dumps(list(options)), "contexts": len(texts), "boundary_contexts": boundary, "distinct_contexts": distinct,
        "distinct": float(every), "rule_distinct": float(rule), "false_clearance": float(rule and not every), "false_alarm": float(not rule and every),
    }


def vocabulary_rows(ctx: RunContext) -> Rows:
    """The rows of every declared set of the run on this checkpoint's tokenizer: a run directory of its
    own (:func:`~sleight.readout.reproduce.kinds.base.single_pass`), no model loaded."""
    from sleight.readout.audit.conditions import condition_items
    from sleight.readout.data import load_data

    sets = {str(k): [str(o) for o in v] for k, v in dict(ctx.spec.settings["sets"]).items()}
    s = ctx.model_spec.with_(revision=ctx.model_spec.revision or ctx.checkpoint.revision)
    records = load_data(ctx.data).view("forecast", ctx.limit)
    config = {
        "data": ctx.data, "limit": ctx.limit, "items_sha256": rundir.digest(records), "sets": json.dumps(sets), "tokenizer": s.model,
        "revision": s.revision, "chat_template_kwargs": json.dumps(dict(s.chat_template_kwargs), sort_keys=True),
    }

    def compute() -> Rows:
        tokens = load_tokenizer(s)
        texts = contexts(tokens, condition_items("C0", records, n=len(records)))
        return [set_row(name, options, texts, tokens.encode) for name, options in sets.items()]

    return single_pass(ctx, KIND, config, SCHEMA, len(sets), compute)


def _check(s: Mapping[str, Any]) -> str | None:
    sets = s.get("sets")
    if not isinstance(sets, Mapping) or not sets:
        return "sets: expected a mapping of set names to lists of option strings"
    bad = [k for k, v in sets.items() if not (isinstance(v, list) and len(v) >= 2 and all(isinstance(o, str) and o for o in v))]
    return f"sets: {', '.join(map(str, bad))}: expected at least two non-empty option strings" if bad else None


def _values() -> dict[str, tuple[str, ...]]:
    return {}


KINDS = (
    RunKind(
        KIND,
        fields=lambda: ("sets",),
        columns=lambda: tuple(SCHEMA.names),
        values=_values,
        families=lambda _s: ("race-h",),
        per_item=lambda _s: (0, 0),  # the tokenizer only: no forward pass
        rows=vocabulary_rows,
        check=_check,
        unit="set",
        pair=("set",),
        context_tokens=0,
        tokenizer_only=True,
    ),
)
