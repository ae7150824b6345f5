"""P(True) beside the field's own estimators, on the user's model (``sleight readout estimators``).

The study's comparison ("Moved beats all fourteen"), run on one model: the model answers each
question greedily (as :func:`~sleight.readout.ptrue.answers.greedy_answers` renders it, the same
rule of correctness) or, as App. E scores Table 10's answers, by one sample drawn as the ``ptrue``
run draws it (:func:`~sleight.readout.ptrue.answers.sampled_generations`), every P(True) readout scores its own answer
(:func:`~sleight.readout.ptrue.readouts.ptrue_readouts`), and lm-polygraph's default estimators
(:data:`~sleight.readout.ptrue.uncertainty.ESTIMATORS`, the library's own classes where it is
installed) score the same answers from the decode's own records and samples drawn for the same
questions, each its own column. AUROC and PRR against correctness, with paired (question-cluster)
bootstrap differences of each P(True) readout against each estimator, on the same replicates
(:func:`~sleight.readout.ptrue.uncertainty.comparison`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict, cast

import pyarrow as pa

from sleight import rundir
from sleight.backends.base import LanguageModel
from sleight.errors import UserError
from sleight.readout.ptrue.answers import POLYGRAPH_STOP, Answer, QAItem, Sampling, sampled_generations, stopped_generation
from sleight.readout.ptrue.pipeline import own_pairs
from sleight.readout.ptrue.readouts import READOUT_LABELS, ptrue_readouts
from sleight.readout.ptrue.uncertainty import DEFAULT_SAMPLES, Comparison, answer_tokens, comparison, estimate
from sleight.render import interval
from sleight.rundir import RunDir
from sleight.stats.downstream import JsonRecord, clean

ANSWER_TOKENS = 32

# One answer, wide: ``item_id``, ``answer``, ``label``, then one column per estimator (its uncertainty)
# and per P(True) readout (``ptrue_<name>``, its probability; None where undefined). The estimators
# are those the run computed, so the keys vary with the run: a plain dictionary of those values.
WideRow = dict[str, str | float | None]


class LongRow(TypedDict):
    """One row of the estimators' readings.parquet (:data:`ESTIMATOR_SCHEMA`): one answer and one
    scorer, written and read back unchanged, keyed by column."""

    item_id: str
    answer: str
    label: float
    scorer: str
    score: float | None
    uncertainty: float | None


@dataclass(frozen=True)
class EstimatorRun:
    """A finished comparison (:func:`run_estimators`, :func:`run_estimators_dir`): who computed the
    estimators, the settings, the notes on those not computed, the wide rows and the summary; a run
    directory adds its long readings and how many chunks this call ran. ``as_json`` is
    estimators.json less the model."""

    engine: str
    instruct: bool
    max_new_tokens: int
    samples: int
    notes: list[str]
    rows: list[WideRow]
    summary: Comparison
    readings: list[LongRow] = field(default_factory=list)
    new_chunks: int = 0

    def as_json(self) -> dict[str, object]:
        return {
            "engine": self.engine, "instruct": self.instruct, "max_new_tokens": self.max_new_tokens, "samples": self.samples,
            "notes": self.notes, "rows": self.rows, "summary": clean(self.summary),
        }


@dataclass(frozen=True)
class Answering:
    """How the model answers and how the estimators sample, as :func:`estimator_rows` takes it from
    both the in-memory comparison (:func:`run_estimators`) and the run directory
    (:func:`run_estimators_dir`). ``answer_sampling``: None, the answer is greedy; else it is one
    sample drawn so (App. E scores Table 10's answers, sampled at each checkpoint's generation
    settings), with the same draw as the ``ptrue`` run's (:func:`~.answers.sampled_answers`)."""

    instruct: bool = True
    max_new_tokens: int = ANSWER_TOKENS
    use_polygraph: bool = True
    samples: int = DEFAULT_SAMPLES
    sampling: Sampling | None = None
    stop: Sequence[str] = POLYGRAPH_STOP
    answer_sampling: Sampling | None = None

    def record(self) -> dict[str, object]:
        """The answer's draw as a run directory's identity records it (nothing for a greedy answer,
        so a run from before sampled answers resumes unchanged)."""
        s = self.answer_sampling
        return {} if s is None else {"decode": "sampled", "temperature": s.temperature, "top_k": s.top_k, "top_p": s.top_p, "sample_seed": s.seed}


def estimator_rows(model: LanguageModel, items: Sequence[QAItem], how: Answering) -> tuple[list[WideRow], str, list[str]]:
    """Per answer: text, correctness, every estimator and every P(True) readout (wide rows); who
    computed the estimators; a note per default estimator not computed, and why. Answers end after
    the first newline as lm-polygraph's configs end them (``how.stop``; ``()``: at EOS or the budget)."""
    prompts = [model.render_chat([{"role": "user", "content": it.prompt}]).text if how.instruct else it.prompt for it in items]
    ids = [model.encode(p) for p in prompts]
    if how.answer_sampling is None:
        gens = [stopped_generation(model, g, how.stop) for g in model.greedy(ids, how.max_new_tokens)]  # lm-polygraph's newline stop
    else:
        gens = sampled_generations(model, ids, how.max_new_tokens, how.answer_sampling, how.stop)
    answers = [Answer(model.decode(g.token_ids), len(g.token_ids), g.finish_reason, p) for g, p in zip(gens, prompts)]
    pairs = own_pairs(items, answers)
    values = ptrue_readouts(model, [p["question"] for p in pairs], [p["answer"] for p in pairs], instruct=how.instruct)
    est, engine, notes = estimate(
        model,
        ids,
        answer_tokens(model, ids, gens),
        questions=[p["question"] for p in pairs],
        answer_texts=[p["answer"] for p in pairs],
        keys=[p["item_id"] for p in pairs],
        p_true=values["library_logprob"],
        instruct=how.instruct,
        max_new_tokens=how.max_new_tokens,
        samples=how.samples,
        sampling=how.sampling,
        use_polygraph=how.use_polygraph,
    )
    readouts = {name: values[name] for name in READOUT_LABELS}  # Library as its probability (the same ranking)
    rows: list[WideRow] = [
        {
            "item_id": p["item_id"],
            "answer": p["answer"],
            "label": p["label"],
            **{k: float(v[i]) for k, v in est.items()},
            **{f"ptrue_{k}": None if readouts[k][i] is None else float(readouts[k][i]) for k in readouts},
        }
        for i, p in enumerate(pairs)
    ]
    return rows, engine, notes


def summarise(rows: Sequence[WideRow], *, B: int = 20000, seed: int = 0) -> Comparison:
    """The comparison over wide rows: every estimator's and P(True) readout's AUROC and PRR, and the
    paired differences (:func:`~sleight.readout.ptrue.uncertainty.comparison`)."""
    est = {k: _numbers(rows, k) for k in rows[0] if k not in ("item_id", "answer", "label") and not k.startswith("ptrue_")} if rows else {}
    pt = {k.removeprefix("ptrue_"): _numbers(rows, k) for k in (rows[0] if rows else {}) if k.startswith("ptrue_")}
    return comparison([cast(float, r["label"]) for r in rows], [r["item_id"] for r in rows], est, pt, B=B, seed=seed)


def _numbers(rows: Sequence[WideRow], key: str) -> list[float | None]:
    """One numeric column of wide rows (every column but ``item_id`` and ``answer`` is a number or None)."""
    return [cast("float | None", r[key]) for r in rows]


def run_estimators(
    model: LanguageModel,
    items: Sequence[QAItem],
    *,
    instruct: bool = True,
    max_new_tokens: int = ANSWER_TOKENS,
    use_polygraph: bool = True,
    samples: int = DEFAULT_SAMPLES,
    sampling: Sampling | None = None,
    answer_sampling: Sampling | None = None,
    B: int = 20000,
    seed: int = 0,
) -> EstimatorRun:
    """Per answer: text, correctness, every estimator and every P(True) readout; and the comparison.

    ``samples`` answers per question are drawn (``sampling``: lm-polygraph's defaults) for the
    sampling-based estimators; ``answer_sampling``: the answer itself sampled (None: greedy);
    ``notes`` names every default estimator not computed, and why."""
    if not items:
        raise UserError("no items to run")
    how = Answering(
        instruct=instruct, max_new_tokens=max_new_tokens, use_polygraph=use_polygraph, samples=samples, sampling=sampling, answer_sampling=answer_sampling
    )
    rows, engine, notes = estimator_rows(model, items, how)
    summary = summarise(rows, B=B, seed=seed)
    return EstimatorRun(engine, instruct, max_new_tokens, samples, notes, rows, summary)


# -- the run directory (kind ``estimators``): one part per chunk of questions, resumed -------------
KIND = "estimators"
PARTS = "parts"
READINGS = "readings.parquet"
CHUNK = 8  # questions per committed part
# Long form, one row per (answer, scorer): ``score`` is the confidence ranked against ``label``
# (-uncertainty for an estimator, the probability for a P(True) readout ``ptrue_<name>``).
ESTIMATOR_SCHEMA = pa.schema(
    [("item_id", pa.string()), ("answer", pa.string()), ("label", pa.float64()), ("scorer", pa.string()), ("score", pa.float64()), ("uncertainty", pa.float64())]
)


def long_rows(wide: Sequence[WideRow]) -> list[LongRow]:
    """Wide rows (one per answer) as :data:`ESTIMATOR_SCHEMA` rows (one per answer and scorer)."""
    out = []
    for r in wide:
        for k, v in r.items():
            if k in ("item_id", "answer", "label"):
                continue
            ptrue = k.startswith("ptrue_")
            value = None if v is None else float(v)
            out.append(LongRow(item_id=str(r["item_id"]), answer=str(r["answer"]), label=float(cast(float, r["label"])), scorer=k,
                               score=value if ptrue or value is None else -value, uncertainty=None if ptrue else value))
    return out


def wide_rows(long: Sequence[LongRow]) -> list[WideRow]:
    out: dict[str, WideRow] = {}
    for r in long:
        w = out.setdefault(r["item_id"], {"item_id": r["item_id"], "answer": r["answer"], "label": r["label"]})
        w[r["scorer"]] = r["score"] if r["scorer"].startswith("ptrue_") else r["uncertainty"]
    return list(out.values())


def run_estimators_dir(
    load_model: Callable[[], LanguageModel],
    items: Sequence[QAItem],
    out_dir: str | Path,
    *,
    instruct: bool = True,
    max_new_tokens: int = ANSWER_TOKENS,
    use_polygraph: bool = True,
    samples: int = DEFAULT_SAMPLES,
    source: str = "items",
    answer_sampling: Sampling | None = None,
    B: int = 20000,
    seed: int = 0,
    overwrite: bool = False,
) -> EstimatorRun:
    """``readout estimators`` as a resumable run directory (App. E's comparison): questions in
    fixed chunks of :data:`CHUNK`, each committed as one part, so a killed run resumes at the first
    chunk not done and a finished one loads no model; then readings.parquet, estimators.json/md.
    ``answer_sampling``: the answers sampled so (recorded in the run's identity), else greedy."""
    if not items:
        raise UserError("no items to run")
    out = Path(out_dir)
    how = Answering(instruct=instruct, max_new_tokens=max_new_tokens, use_polygraph=use_polygraph, samples=samples, answer_sampling=answer_sampling)
    config = {"items": {"source": source, "n": len(items), "sha256": rundir.digest([repr(it) for it in items])}, "instruct": instruct,
              "max_new_tokens": max_new_tokens, "use_polygraph": use_polygraph, "samples": samples, "chunk": CHUNK, **how.record()}
    run = RunDir(out, KIND)
    run.check(config, overwrite=overwrite)
    parts = run.parts(PARTS, ESTIMATOR_SCHEMA)
    chunks = {f"{k:05d}": list(items[k : k + CHUNK]) for k in range(0, len(items), CHUNK)}
    done = parts.verified(list(chunks))
    todo = [k for k in chunks if k not in done]
    loaded: list[LanguageModel] = []

    def start() -> dict[str, Any]:
        loaded.append(load_model())
        return loaded[0].info.as_dict()

    def write(k: str, tmp_dir: Path) -> None:
        wide, engine, notes = estimator_rows(loaded[0], chunks[k], how)
        rundir.write_json(out / "engine.json", {"engine": engine, "notes": notes})
        parts.write(k, rundir.table_from_rows(long_rows(wide), ESTIMATOR_SCHEMA), tmp_dir=tmp_dir)

    run.commit_parts(config, todo, units=len(chunks), start=start, write=write, extra={"engine": None})
    table = parts.read(list(chunks))
    rundir.write_table(out / READINGS, table, schema=ESTIMATOR_SCHEMA)
    long = cast(list[LongRow], table.to_pylist())  # read in ESTIMATOR_SCHEMA
    wide = wide_rows(long)
    info = rundir.read_json(out / "engine.json")
    result = EstimatorRun(info["engine"], instruct, max_new_tokens, samples, info["notes"], wide, summarise(wide, B=B, seed=seed), long, len(todo))
    write_result(out, result, dict(run.require().get("model") or {}))
    return result


def _ci(m: JsonRecord | None, key: str = "estimate") -> str:
    return interval(None if m is None else m.as_json(), key=key)


def render_markdown(result: EstimatorRun, model_id: str) -> str:
    s = result.summary
    lines = [
        "# P(True) beside lm-polygraph's uncertainty estimators",
        "",
        f"Model `{model_id}`; {s.n} own answers, {s.n_correct} correct; estimators computed by {result.engine}; "
        "confidence = -uncertainty. Intervals: 95% cluster bootstrap over questions.",
        "",
        "| score | AUROC | PRR |",
        "|---|---|---|",
    ]
    for name, m in s.estimators.items():
        lines.append(f"| {name} | {_ci(m['auroc'])} | {_ci(m['prr'])} |")
    for name, m in s.ptrue.items():
        lines.append(f"| P(True): {READOUT_LABELS.get(name, name)} | {_ci(m['auroc'])} | {_ci(m['prr'])} |")
    lines += ["", "Paired differences (P(True) readout minus estimator, same replicates):", "", "| pair | ΔAUROC | ΔPRR |", "|---|---|---|"]
    for pair, d in s.differences.items():
        cells = [_ci(d[m], key="diff") for m in ("auroc", "prr")]
        lines.append(f"| {pair} | {cells[0]} | {cells[1]} |")
    if result.notes:
        lines += ["", "Not computed:", ""] + [f"- {n}" for n in result.notes]
    return "\n".join(lines) + "\n"


def write_result(out_dir: str | Path, result: EstimatorRun, model_info: Mapping[str, object]) -> dict[str, Path]:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    files = {"json": out / "estimators.json", "md": out / "estimators.md"}
    rundir.write_json(files["json"], {"model": model_info, **result.as_json()})
    rundir.write_text(files["md"], render_markdown(result, str(model_info.get("model_id", "?"))))
    return files


def load_result(out_dir: str | Path) -> dict[str, Any]:
    return json.loads((Path(out_dir) / "estimators.json").read_text(encoding="utf-8"))
