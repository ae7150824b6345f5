"""P(True) beside the field's own estimators, on the user's model (``sleight readout estimators``).

The study's comparison ("Moved beats all fourteen"), run on one model: the model answers each
question greedily (as :func:`~sleight.readout.ptrue.answers.greedy_answers` renders it, the same
rule of correctness), every P(True) readout scores its own answer
(:func:`~sleight.readout.ptrue.readouts.ptrue_readouts`), and lm-polygraph's default estimators
(:data:`~sleight.readout.ptrue.uncertainty.ESTIMATORS`, the library's own classes where it is
installed) score the same answers from the decode's own records and samples drawn for the same
questions, each its own column. AUROC and PRR against correctness, with paired (question-cluster)
bootstrap differences of each P(True) readout against each estimator, on the same replicates
(:func:`~sleight.readout.ptrue.uncertainty.comparison`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sleight import rundir
from sleight.backends.base import LanguageModel
from sleight.errors import UserError
from sleight.readout.ptrue.answers import Answer, QAItem, Sampling
from sleight.readout.ptrue.pipeline import own_pairs
from sleight.readout.ptrue.readouts import READOUT_LABELS, ptrue_readouts
from sleight.readout.ptrue.uncertainty import DEFAULT_SAMPLES, answer_tokens, comparison, estimate
from sleight.render import interval

ANSWER_TOKENS = 32


def run_estimators(
    model: LanguageModel,
    items: Sequence[QAItem],
    *,
    instruct: bool = True,
    max_new_tokens: int = ANSWER_TOKENS,
    use_polygraph: bool = True,
    samples: int = DEFAULT_SAMPLES,
    sampling: Sampling | None = None,
    B: int = 20000,
    seed: int = 0,
) -> dict[str, Any]:
    """Per answer: text, correctness, every estimator and every P(True) readout; and the comparison.

    ``samples`` answers per question are drawn (``sampling``: lm-polygraph's defaults) for the
    sampling-based estimators; ``notes`` names every default estimator not computed, and why."""
    if not items:
        raise UserError("no items to run")
    prompts = [model.render_chat([{"role": "user", "content": it.prompt}]).text if instruct else it.prompt for it in items]
    ids = [model.encode(p) for p in prompts]
    gens = model.greedy(ids, max_new_tokens)
    answers = [Answer(model.decode(g.token_ids), len(g.token_ids), g.finish_reason, p) for g, p in zip(gens, prompts)]
    pairs = own_pairs(items, answers)
    values = ptrue_readouts(model, [p["question"] for p in pairs], [p["answer"] for p in pairs], instruct=instruct)
    est, engine, notes = estimate(
        model,
        ids,
        answer_tokens(model, ids, gens),
        questions=[p["question"] for p in pairs],
        answer_texts=[p["answer"] for p in pairs],
        keys=[p["item_id"] for p in pairs],
        p_true=values["library_logprob"],
        instruct=instruct,
        max_new_tokens=max_new_tokens,
        samples=samples,
        sampling=sampling,
        use_polygraph=use_polygraph,
    )
    readouts = {name: values[name] for name in READOUT_LABELS}  # Library as its probability (the same ranking)
    rows = [
        {
            "item_id": p["item_id"],
            "answer": p["answer"],
            "label": p["label"],
            **{k: float(v[i]) for k, v in est.items()},
            **{f"ptrue_{k}": float(v[i]) for k, v in readouts.items()},
        }
        for i, p in enumerate(pairs)
    ]
    summary = comparison([p["label"] for p in pairs], [p["item_id"] for p in pairs], est, {k: list(v) for k, v in readouts.items()}, B=B, seed=seed)
    return {"engine": engine, "instruct": instruct, "max_new_tokens": max_new_tokens, "samples": samples, "notes": notes, "rows": rows, "summary": summary}


def render_markdown(result: dict[str, Any], model_id: str) -> str:
    s = result["summary"]
    lines = [
        "# P(True) beside lm-polygraph's uncertainty estimators",
        "",
        f"Model `{model_id}`; {s['n']} own answers, {s['n_correct']} correct; estimators computed by {result['engine']}; "
        "confidence = -uncertainty. Intervals: 95% cluster bootstrap over questions.",
        "",
        "| score | AUROC | PRR |",
        "|---|---|---|",
    ]
    for name, m in s["estimators"].items():
        lines.append(f"| {name} | {interval(m['auroc'])} | {interval(m['prr'])} |")
    for name, m in s["ptrue"].items():
        lines.append(f"| P(True): {READOUT_LABELS.get(name, name)} | {interval(m['auroc'])} | {interval(m['prr'])} |")
    lines += ["", "Paired differences (P(True) readout minus estimator, same replicates):", "", "| pair | ΔAUROC | ΔPRR |", "|---|---|---|"]
    for pair, d in s["differences"].items():
        cells = [interval(d[m], key="diff") for m in ("auroc", "prr")]
        lines.append(f"| {pair} | {cells[0]} | {cells[1]} |")
    if result.get("notes"):
        lines += ["", "Not computed:", ""] + [f"- {n}" for n in result["notes"]]
    return "\n".join(lines) + "\n"


def write_result(out_dir: str | Path, result: dict[str, Any], model_info: dict[str, Any]) -> dict[str, Path]:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    files = {"json": out / "estimators.json", "md": out / "estimators.md"}
    rundir.write_json(files["json"], {"model": model_info, **result})
    rundir.write_text(files["md"], render_markdown(result, str(model_info.get("model_id", "?"))))
    return files


def load_result(out_dir: str | Path) -> dict[str, Any]:
    return json.loads((Path(out_dir) / "estimators.json").read_text(encoding="utf-8"))
