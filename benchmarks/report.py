"""Time judging bookkeeping and the report at full-sweep scale, without running a model.

Run:  python benchmarks/report.py [--questions 100] [--substitutes 101] [--tokens 200] [--jurors 3]

Synthesizes a run directory in the engine's storage format (trials.parquet/ and clean.parquet/
parts with the public schema; token ids are a real reply's tokens repeated), stores one vote per
(trial, juror), then times the verdicts and ``write_report`` (tables, plots, site and viewers) and
prints the size of the viewer data. It measures the report's own cost, not model speed.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from sleight.backends import DEFAULT_MODEL
from sleight.tamper.jury import store as jury_store
from sleight.tamper.jury.judged import judged_trials, load_run_trials
from sleight.tamper.records import CLEAN_SCHEMA, TRIALS_SCHEMA
from sleight.tamper.report.report import write_report

SAMPLE = "The capital of France is Paris. It is known for the Eiffel Tower, the Louvre and the Seine river. "


def synth_run(out: Path, questions: int, substitutes: int, tokens: int, seed: int = 0) -> None:
    from transformers import AutoTokenizer

    from sleight.backends import resolve

    tok = AutoTokenizer.from_pretrained(resolve(DEFAULT_MODEL).load_path)
    base = tok.encode(SAMPLE, add_special_tokens=False)
    ids = (base * (tokens // len(base) + 1))[:tokens]
    reply = tok.decode(ids)
    rng = np.random.default_rng(seed)
    (out / "trials.parquet").mkdir(parents=True)
    (out / "clean.parquet").mkdir()
    k = 20
    for q in range(questions):
        qid = f"q{q + 1:03d}"
        sig = lambda: rng.gamma(1.0, 1.0, tokens).astype(np.float32).tolist()  # noqa: E731
        common = dict(model=DEFAULT_MODEL, question_index=q, question_id=qid, question=f"synthetic question {q}?", trigger="the")
        top_ids = [[int(i)] * k for i in ids]
        top_lp = [[-1.0] * k for _ in ids]
        clean = dict(
            common, rendered_prompt="", reply=reply, n_tokens=tokens, finish_reason="length", n_triggers=1,
            trigger_steps=[0], trigger_ends=[1], token_ids=ids, logprobs=sig(), surprisal=sig(),
            entropy_top20=sig(), entropy_full=sig(), top20_ids=top_ids, top20_logprobs=top_lp,
        )  # fmt: skip
        pq.write_table(pa.Table.from_pylist([clean], schema=CLEAN_SCHEMA), out / "clean.parquet" / f"{q:05d}-{qid}.parquet")
        rows = []
        for s in range(substitutes):
            steps = sorted(rng.choice(np.arange(1, tokens - 1), 5, replace=False).tolist())
            inj = np.zeros(tokens, bool)
            inj[steps] = True
            masked = lambda inj=inj, sig=sig: [None if b else v for b, v in zip(inj, sig())]  # noqa: E731
            rows.append(
                dict(
                    common, substitute_index=s, substitute="Mandela effect" if s == 0 else f"word{s}", is_entity=s == 0,
                    untouched=False, reply=reply, n_tokens=tokens, finish_reason="length", n_swaps=5, swap_steps=steps,
                    swap_ids=[[ids[i]] for i in steps], n_substitutions=5, n_fallbacks=0, injected=inj.tolist(),
                    token_ids=ids, logprobs=sig(), surprisal=masked(), entropy_top20=masked(), entropy_full=masked(),
                    top20_ids=top_ids, top20_logprobs=top_lp, delta_surprisal=float(rng.normal()), delta_entropy=float(rng.normal()),
                    delta_surprisal_matched=float(rng.normal()), delta_entropy_matched=float(rng.normal()),
                    delta_entropy_full=float(rng.normal()), delta_entropy_full_matched=float(rng.normal()),
                )
            )  # fmt: skip
        pq.write_table(pa.Table.from_pylist(rows, schema=TRIALS_SCHEMA), out / "trials.parquet" / f"{q:05d}-{qid}.parquet")
    (out / "manifest.json").write_text(json.dumps({"config": {"trigger": "the"}, "model": {"spec": DEFAULT_MODEL}}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--questions", type=int, default=100)
    ap.add_argument("--substitutes", type=int, default=101)
    ap.add_argument("--tokens", type=int, default=200)
    ap.add_argument("--jurors", type=int, default=3)
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="sleight-bench-report-"))
    try:
        run = root / "run"
        t0 = time.perf_counter()
        synth_run(run, args.questions, args.substitutes, args.tokens)
        trials, _ = load_run_trials(run)
        judged = judged_trials(trials)
        rng = np.random.default_rng(1)
        jury = [f"juror{i}" for i in range(args.jurors)]
        votes = []
        for juror in jury:
            lab = rng.random((len(judged), 5))
            for t, r in zip(judged[["model", "question_id", "substitute"]].to_dict("records"), lab):
                ab = bool(r[4] < 0.05)
                votes.append(
                    dict(t, juror=juror, prompt_variant="default", flagged=None if ab else bool(r[0] < 0.3), corrected=None if ab else bool(r[1] < 0.6),
                         derailed=None if ab else bool(r[2] < 0.2), switch_aware=None if ab else bool(r[3] < 0.1), reason="", abstained=ab,
                         attempts=2 if ab else 1, raw_reply="{}", latency_s=0.1, judged_at="")
                )  # fmt: skip
        jury_store.append_judgements(run, votes)
        print(f"synthesized {len(trials)} trials x {args.tokens} tokens and {len(votes)} votes in {time.perf_counter() - t0:.1f}s")
        t1 = time.perf_counter()
        verdicts = jury_store.compute_verdicts(judged, jury_store.load_judgements(run), jury, "default")
        jury_store.write_verdicts(run, verdicts, {"jury": jury, "jury_size": len(jury), "prompt_variant": "default"})
        t2 = time.perf_counter()
        write_report([run], root / "report", progress=False)
        t3 = time.perf_counter()
        data = root / "report" / "models"
        files = sorted(data.rglob("*.js"))
        index = [f for f in files if f.name == "trials.js"][0]
        per_q = [f.stat().st_size for f in files if f.name != "trials.js"]
        print(f"verdicts (load votes + majority + write): {t2 - t1:.2f}s")
        print(f"write_report (tables, plots, site, viewer): {t3 - t2:.2f}s")
        print(
            f"viewer data: {sum(f.stat().st_size for f in files) / 1e6:.1f} MB in {len(per_q)} question files "
            f"(mean {np.mean(per_q) / 1e3:.0f} KB, loaded one at a time) + trial index {index.stat().st_size / 1e6:.2f} MB"
        )
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
