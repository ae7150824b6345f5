"""The reader forecast read eight ways, every pair compared on the same bootstrap replicates.

Beside the study's original and stemmed positions (:mod:`.forecast_pipeline`), the same forecast is
read

* (c) ``deleted`` -- with the quoted item's instruction ("Answer with exactly one of: A, B, C, D.")
  deleted, at the original position;
* (d) ``alt`` -- through an alternative template (``{note}`` and ``{item}`` placeholders; by default
  App. I's T1 as printed, :data:`T1_TEMPLATE`; ``--template FILE`` takes the user's), at its
  generation prompt;
* (e) ``alt_stem`` -- the same with the template's own answer stem prefilled (T1's ``"Estimate: "``);
* (f) ``continuation`` -- the number parsed from the model's greedy continuation at the original
  position (48 tokens, Appendix H: :data:`~sleight.readout.forecast.pipeline.CONTINUATION_TOKENS`):
  the first grid value written, 0.5 when there is none
  (:func:`~sleight.readout.scan.text_parsers.continuation_forecast`);
* (g) ``stem_number`` and (h) ``stem_forecast`` -- Appendix H's short stems, ``"Number: "`` and
  ``"Forecast: "``, each appended as text after the forecast prompt's generation prompt (the
  rendering rule of the stem position).

(a)-(e), (g) and (h) are renormalised over the declared grid, ``Σ (int(o)/100)·p_o``. Every readout
is scored on the items where all of them are defined, so each pair's paired interval (and every single
interval) uses the same replicates: one cluster bootstrap over passages, one seed.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Any, TypedDict

import numpy as np

from sleight.backends.base import LanguageModel
from sleight.errors import UserError
from sleight.position import read_positions
from sleight.readout.audit.presets import FORECAST_OPTIONS
from sleight.readout.audit.variants import Skipped, VariantSpec, make_variant, render
from sleight.readout.forecast.pipeline import RaceItem, forecast_item, quoted_item
from sleight.readout.scan.run import expected_score
from sleight.readout.scan.text_parsers import continuation_forecast
from sleight.stats.downstream import MetricInterval, PairedDifference, clean, metric_interval, paired_difference

READOUTS: dict[str, str] = {
    "original": "(a) original position",
    "stem": "(b) answer stem",
    "deleted": "(c) quoted instruction deleted",
    "alt": "(d) alternative template",
    "alt_stem": "(e) alternative template, its own stem",
    "continuation": "(f) number in the greedy continuation",
    "stem_number": '(g) short stem "Number: "',
    "stem_forecast": '(h) short stem "Forecast: "',
}
SHORT_STEMS: dict[str, str] = {"stem_number": "Number: ", "stem_forecast": "Forecast: "}  # Appendix H
ALT_TEMPLATE = "forecast_alt.txt"  # the project's own template before issue #27 (``--template`` still reads any)
PLACEHOLDERS = ("{note}", "{item}")
# App. I's T1, as printed, the paper's readouts (d) and (e) of Table 13. Its sentences are the paper's;
# where its line breaks fall is inferred (the printed box marks typeset breaks, not newlines): one
# paragraph per block, the note and the item each on its labelled line.
T1_TEMPLATE = (
    "Someone read a passage and wrote the short note below. Imagine 100 readers who will see only this note and the question "
    "below, including its final answer instruction. They will never see the passage. Each reader will answer the question, and "
    "correctness will be judged against the original passage.\n\n"
    "Note: {note}\n\n"
    "Question: {item}\n\n"
    "Estimate how many of these 100 readers will answer correctly. Consider how much useful information the note provides, "
    "whether it distinguishes the choices, and where readers may misunderstand or have to guess.\n\n"
    "The question's instruction to answer with a letter is for the readers. Your task is to forecast their number of correct answers.\n\n"
    "Choose the closest of these five counts to your estimate: 10, 30, 50, 70, 90. Reply with exactly one of these values and nothing else."
)
T1_STEM = "Estimate: "  # App. I: T1's answer stem
ALT_STEM = T1_STEM


class ReadoutRecord(TypedDict):
    """One item read every way of :data:`READOUTS` (:func:`extra_readouts`): its target, cluster
    and each readout's forecast (None where undefined), as forecast_readouts.json records it
    unchanged, in this key order."""

    item_id: str
    cluster: int
    correct: bool | None
    original: float | None
    stem: float | None
    deleted: float | None
    alt: float | None
    alt_stem: float | None
    continuation: float | None
    continuation_text: str | None
    stem_number: float | None  # SHORT_STEMS, in their order
    stem_forecast: float | None
    masses: dict[str, float | None]  # the option mass at each position read here: App. H prints their medians


def shipped_alt_template() -> str:
    """The alternative template of readouts (d) and (e): the paper's T1 (App. I, Table 13)."""
    return T1_TEMPLATE


def project_alt_template() -> str:
    """The project's own alternative template (before issue #27), kept for comparison."""
    return resources.files("sleight").joinpath("data/scorers").joinpath(ALT_TEMPLATE).read_text(encoding="utf-8")


def check_alt_template(text: str, where: str) -> str:
    missing = [p for p in PLACEHOLDERS if p not in text]
    if missing:
        raise UserError(f"{where}: an alternative forecast template needs the placeholder(s) {', '.join(missing)}")
    return text


def alt_prompt(template: str, note: str, item: RaceItem) -> str:
    return template.replace("{note}", note).replace("{item}", quoted_item(item))


def _scores(model: LanguageModel, contexts: Sequence[str | None]) -> list[tuple[float | None, float | None]]:
    """Each context's renormalised forecast and its option mass (None, None: not read)."""
    live = [k for k, c in enumerate(contexts) if c is not None]
    out: list[tuple[float | None, float | None]] = [(None, None)] * len(contexts)
    reads = read_positions(model, [contexts[k] for k in live], [[FORECAST_OPTIONS]] * len(live), score_options=True)  # type: ignore[misc]
    for k, r in zip(live, reads):
        out[k] = (expected_score(list(r.option_sets[0].logprobs), FORECAST_OPTIONS, 100.0), r.option_sets[0].mass)
    return out


def extra_readouts(
    model: LanguageModel,
    items: Sequence[RaceItem],
    rows: Sequence[Mapping[str, Any]],
    *,
    template: str | None = None,
    stem: str = ALT_STEM,
) -> list[ReadoutRecord]:
    """One record per item: its target, cluster and every readout of :data:`READOUTS` (None where undefined).

    ``rows`` are :func:`~sleight.readout.forecast.pipeline.run_forecast`'s (its notes, reader
    correctness, original/stem scores and the greedy continuation at the original position).
    """
    tpl = check_alt_template(template, "--template") if template is not None else shipped_alt_template()
    by = {(r["item_id"], r["position"]): r for r in rows}
    deleted_ctx: list[str | None] = []
    alt_ctx, alt_stem_ctx = [], []
    short_ctx: dict[str, list[str | None]] = {k: [] for k in SHORT_STEMS}
    for it in items:
        orig = by[(it.id, "original")]
        f_item = forecast_item(it, orig["note"], None)
        spec = make_variant(f_item, "deleted_instruction")
        deleted_ctx.append(None if isinstance(spec, Skipped) else render(model, spec))
        msgs = [{"role": "user", "content": alt_prompt(tpl, orig["note"], it)}]
        alt_ctx.append(model.render_chat(msgs).text)
        alt_stem_ctx.append(model.render_chat(msgs, prefill=stem).text)
        for key, short in SHORT_STEMS.items():
            short_ctx[key].append(render(model, VariantSpec("stem", tuple(f_item.messages), prefill=short, chat_template=f_item.chat_template)))
    deleted, alt, alt_stem = _scores(model, deleted_ctx), _scores(model, alt_ctx), _scores(model, alt_stem_ctx)
    short_scores = {k: _scores(model, v) for k, v in short_ctx.items()}
    out: list[ReadoutRecord] = []
    for k_item, it in enumerate(items):
        orig, st = by[(it.id, "original")], by[(it.id, "stem")]
        out.append(
            ReadoutRecord(
                item_id=it.id,
                cluster=orig["cluster"],
                correct=orig["correct"],
                original=orig["score"],
                stem=st["score"],
                deleted=deleted[k_item][0],
                alt=alt[k_item][0],
                alt_stem=alt_stem[k_item][0],
                continuation=continuation_forecast(orig.get("continuation") or "", FORECAST_OPTIONS),
                continuation_text=orig.get("continuation"),
                stem_number=short_scores["stem_number"][k_item][0],
                stem_forecast=short_scores["stem_forecast"][k_item][0],
                masses={
                    "original": orig.get("option_mass"), "stem": st.get("option_mass"), "deleted": deleted[k_item][1], "alt": alt[k_item][1],
                    "alt_stem": alt_stem[k_item][1], **{k: short_scores[k][k_item][1] for k in SHORT_STEMS},
                },
            )
        )
    return out


class ReadoutsSummary(TypedDict):
    """forecast_readouts.json's ``summary`` (:func:`summarise_readouts`), as JSON (NaN as null): per
    readout its AUROC and Brier (:class:`~sleight.stats.downstream.MetricInterval`'s JSON) and
    mean forecast, per pair ``"a - b"`` the paired differences (``PairedDifference``'s JSON)."""

    n_items: int
    n_scored: int
    B: int
    seed: int
    level: float
    labels: dict[str, str]
    readouts: dict[str, dict[str, object]]
    pairs: dict[str, dict[str, object]]


def summarise_readouts(records: Sequence[Mapping[str, Any]], *, B: int = 20000, seed: int = 0, level: float = 0.95) -> ReadoutsSummary:
    """AUROC and Brier per readout, and every pair's paired difference, on the common items."""
    ok = [r for r in records if r["correct"] is not None and all(r[k] is not None and math.isfinite(float(r[k])) for k in READOUTS)]
    y = np.asarray([float(r["correct"]) for r in ok])
    cl = np.asarray([r["cluster"] for r in ok])
    s = {k: np.asarray([float(r[k]) for r in ok]) for k in READOUTS}
    readouts: dict[str, dict[str, MetricInterval | float]] = {}
    pairs: dict[str, dict[str, PairedDifference]] = {}
    if ok:
        for k in READOUTS:
            readouts[k] = {m: metric_interval(m, s[k], y, clusters=cl, B=B, seed=seed, level=level) for m in ("auroc", "brier")} | {"mean": float(s[k].mean())}
        for a, b in itertools.combinations(READOUTS, 2):
            pairs[f"{a} - {b}"] = {m: paired_difference(m, s[a], s[b], y, clusters=cl, B=B, seed=seed, level=level, name_a=a, name_b=b) for m in ("auroc", "brier")}
    return ReadoutsSummary(
        n_items=len(records), n_scored=len(ok), B=B, seed=seed, level=level, labels=dict(READOUTS), readouts=clean(readouts), pairs=clean(pairs)
    )


def render_markdown(summary: Mapping[str, Any]) -> str:
    f = lambda v: "–" if v is None else f"{v:.3f}"  # noqa: E731
    ci = lambda m: "–" if not m else f"{f(m.get('estimate'))} [{f(m.get('low'))}, {f(m.get('high'))}]"  # noqa: E731
    lines = [
        f"# The reader forecast, {len(READOUTS)} readouts",
        "",
        f"{summary['n_scored']} of {summary['n_items']} items scored (all {len(READOUTS)} defined); 95% cluster bootstrap over passages, B={summary['B']}, the same replicates for every interval.",
        "",
        "| readout | mean forecast | AUROC | Brier |",
        "|---|---|---|---|",
    ]
    for k, m in summary["readouts"].items():
        lines.append(f"| {READOUTS[k]} | {f(m['mean'])} | {ci(m['auroc'])} | {ci(m['brier'])} |")
    lines += ["", "Paired differences (a - b; for Brier the gain is b - a, positive = a better):", "", "| pair | ΔAUROC | Brier gain |", "|---|---|---|"]
    for pair, d in summary["pairs"].items():
        au, br = d["auroc"], d["brier"]
        lines.append(f"| {pair} | {f(au['diff'])} [{f(au['low'])}, {f(au['high'])}] | {f(br['gain'])} [{f(br['gain_low'])}, {f(br['gain_high'])}] |")
    return "\n".join(lines) + "\n"


def load_alt_template(path: str | None) -> str | None:
    """``--template FILE``, checked (None: the shipped template)."""
    if not path:
        return None
    p = Path(path)
    if not p.is_file():
        raise UserError(f"template file not found: {p}")
    return check_alt_template(p.read_text(encoding="utf-8"), p.name)


def run_forecast_readouts(
    model: LanguageModel,
    items: Sequence[RaceItem],
    out_dir: str | Path,
    *,
    template: str | None = None,
    stem: str | None = None,
    B: int = 20000,
    status: Callable[[str], None] | None = None,
) -> ReadoutsSummary:
    """``sleight readout forecast-readouts``: the forecast pipeline, the extra readouts, their
    summary; writes forecast_readouts.json and forecast_readouts.md (atomically) and returns the summary."""
    from sleight import rundir
    from sleight.readout.forecast.pipeline import run_forecast

    if B < 1:
        raise UserError("--bootstrap must be at least 1")
    rows = run_forecast(model, items, status=status)
    records = extra_readouts(model, items, rows, template=template, stem=stem or ALT_STEM)
    summary = summarise_readouts(records, B=B)
    out = Path(out_dir)
    rundir.write_json(out / "forecast_readouts.json", {"model": model.info.as_dict(), "records": records, "summary": summary})
    rundir.write_text(out / "forecast_readouts.md", render_markdown(summary))
    return summary
