"""The reply text a judge reads, as the jury's rules say: the stored ``reply``, or the study's text.

The study handed its judges ``reaction_text`` (fractalego/Sleight-of-Word at 08d2bae,
``scripts/panel_judge.py`` line 59 and lines 115-118, ``reaction=t["rx"]``), which its runner wrote
as ``tokenizer.decode(st.assistant_ids)`` (``src/awareness/runner.py`` line 391): every token of the
reply -- the model's, the substitutes spliced in, and the end-of-turn token vLLM returns with a reply
the model ended -- decoded by the subject's own tokenizer (``llm.get_tokenizer()``, line 356) with
that call's defaults, special tokens kept. So a reply the model ended reaches the judges ending in
its end-of-turn marker (``<|im_end|>`` on the bundled model), where sleight's ``reply`` column leaves
that token out and decodes with clean-up off.

Under the study's conventions (:data:`sleight.jury.rules.STUDY`, ``reaction="tokens"``) each judged
trial's ``token_ids`` -- which, for a run made under those conventions, end with the kept end-of-turn
token -- are decoded here the same way, with the subject's tokenizer loaded alone (no weights) from
the model the run's manifest names. Under sleight's the stored ``reply`` is read unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from sleight.errors import UserError

Decoder = Callable[[Sequence[int]], str]


def study_text(tokenizer: Any, token_ids: Sequence[int]) -> str:
    """``tokenizer.decode(token_ids)`` exactly as the study called it (runner.py line 391): no
    argument but the ids, so special tokens are kept and clean-up is the tokenizer's own setting."""
    return str(tokenizer.decode([int(t) for t in token_ids]))


def _model_record(manifest: Mapping[str, Any]) -> tuple[str, str | None]:
    m = manifest.get("model")
    if isinstance(m, Mapping) and m.get("spec"):
        revision = m.get("load", {}).get("revision") if isinstance(m.get("load"), Mapping) else None
        return str(m["spec"]), (str(revision) if revision else None)
    if isinstance(m, str) and m:
        return m, None
    raise UserError("the run's manifest names no model, so its replies cannot be decoded as the study decoded them")


def subject_tokenizer(manifest: Mapping[str, Any], run_dir: Path) -> Any:
    """The tokenizer of the model that wrote the run (its manifest's spec, resolved offline where it
    can be, as the run resolved it); one line when it cannot be loaded here."""
    from transformers import AutoTokenizer

    from sleight.backends.resolve import resolve

    spec, revision = _model_record(manifest)
    try:
        return AutoTokenizer.from_pretrained(resolve(spec, revision).load_path)
    except (UserError, OSError, ValueError) as exc:
        why = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise UserError(
            f"run {run_dir}: under the study's conventions the judges read each reply as its model's tokenizer decodes it, "
            f"and the tokenizer of '{spec}' cannot be loaded here ({why}); judge where the model is, or with --conventions sleight"
        ) from None


def reaction_texts(trials: pd.DataFrame, decode: Decoder | None) -> list[str]:
    """Each judged trial's text for the judges: ``decode(token_ids)`` (the study's), or the stored
    ``reply`` when ``decode`` is ``None`` (sleight's)."""
    if decode is None:
        return [str(r) for r in trials["reply"]]
    return [decode(list(ids)) for ids in trials["token_ids"]]


def study_decoder(manifest: Mapping[str, Any], run_dir: Path, cache: dict[tuple[str, str | None], Any] | None = None) -> Decoder:
    """The study's decode for one run, its tokenizer shared with the other runs of the same model."""
    key = _model_record(manifest)
    cache = {} if cache is None else cache
    if key not in cache:
        cache[key] = subject_tokenizer(manifest, run_dir)
    tok = cache[key]
    return lambda ids: study_text(tok, ids)
