"""One question's 101 trials three ways: hf lockstep, two-phase on vLLM, and the study's method on vLLM.

    python benchmarks/vllm_speed.py                                   # q005 x 101 substitutes, budget 256
    python benchmarks/vllm_speed.py --substitutes 4 --budget 32       # smoke, about two minutes

1. **hf lockstep** (sleight's default): the clean run, then one hooked batch of every trial.
2. **two-phase on vLLM** (``--engine vllm``): Phase A plain greedy requests with prefix caching (a
   row goes out again after each swap, for its new tail), Phase B vLLM scoring its own tokens
   (``prompt_logprobs=20`` on the decided replies; no twin, one model in memory).
3. **the study's method on vLLM** ("splice and regenerate", ``awareness/runner.py``): every round
   generates the *whole remaining budget* of every live trial with top-20 log-probs, keeps the tokens
   before the first trigger, splices the substitute in, and sends the trial out again; a trial whose
   new tokens hold no trigger is done. The trigger rule here is the token whose text is the whole word
   (the study's token-level rule); the cost, not the labels, is what this path measures.

Printed per path: seconds, trials/s, reply tokens/s, requests, tokens decoded and prefilled, prefix
cache hits (vLLM's own counters), whether the trials equal the lockstep ones, and the projected full
sweep (100 x 101 trials at this question's trials/s). Run it alone on the machine: the figures are
only as quiet as the machine. vLLM needs ``VLLM_CPU_KVCACHE_SPACE`` or takes ``--kv-cache-gib``.
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def study_splice(v, prompt: list[int], prefix: list[int], subs: list[str], budget: int, word: str = "the") -> dict[str, float]:
    """The study's splice-and-regenerate loop on the vLLM engine ``v``; its cost counters."""
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    is_word = {t for t in range(v.vocab_size) if v.token_text(t).strip().lower() == word}
    live = {i: prefix + v.encode(" " + s)[: budget - len(prefix)] for i, s in enumerate(subs)}
    done: dict[int, list[int]] = {}
    cost = {"requests": 0, "decoded": 0, "prefilled": 0, "rounds": 0}
    while live:
        cost["rounds"] += 1
        order = [i for i in live if budget - len(live[i]) > 0]
        for i in [i for i in live if i not in order]:
            done[i] = live.pop(i)
        params = [SamplingParams(temperature=0.0, max_tokens=budget - len(live[i]), logprobs=20, detokenize=False) for i in order]
        outs = v.llm.generate([TokensPrompt(prompt_token_ids=prompt + live[i]) for i in order], params, use_tqdm=False)
        cost["requests"] += len(order)
        for i, o in zip(order, outs):
            new = [int(t) for t in o.outputs[0].token_ids if int(t) not in v.eos_ids]
            cost["decoded"] += len(o.outputs[0].token_ids)
            cost["prefilled"] += len(prompt) + len(live[i])
            hit = next((j for j, t in enumerate(new) if t in is_word), None)
            if hit is None:
                done[i] = live.pop(i) + new
            else:
                live[i] = (live[i] + new[:hit] + v.encode(" " + subs[i]))[:budget]
    return cost


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--question", default="q005")
    ap.add_argument("--substitutes", type=int, default=101)
    ap.add_argument("--budget", type=int, default=256)
    ap.add_argument("--kv-cache-gib", type=float, default=None)
    ap.add_argument("--skip-study", action="store_true", help="leave out the study's method")
    args = ap.parse_args()

    from sleight.backends import load_model
    from sleight.tamper import engine, two_phase
    from sleight.tamper.data import load_questions, load_substitutes

    qs = {q.id: q.question for q in load_questions()[0]}
    subs = load_substitutes(limit=args.substitutes)[0]
    cfg = engine.TamperConfig(max_new_tokens=args.budget)
    hf = load_model()
    rendered = engine.render_question(hf, qs[args.question])
    hf.greedy([rendered.ids], 4)  # warm-up

    rows = []
    t0 = time.perf_counter()
    clean = engine.clean_run(hf, rendered, cfg)
    lock = engine.batched_trials(hf, clean, subs, cfg)
    rows.append(("hf lockstep", time.perf_counter() - t0, lock, {}))

    v = load_model(engine="vllm", kv_cache_gib=args.kv_cache_gib)
    v.generate_until([rendered.ids], 4)  # warm-up
    before = v.engine_stats()
    t0 = time.perf_counter()
    clean2 = two_phase.clean_run(v, rendered, cfg)
    tp = two_phase.batched_trials(v, clean2, subs, cfg)
    seconds = time.perf_counter() - t0
    after = v.engine_stats()
    cost = {f: sum(getattr(t.cost, f) for t in tp) for f in ("requests", "decoded", "prefilled")}
    cost["prefix hits"] = after["prefix_cache_hits"] - before["prefix_cache_hits"]
    cost["prefix queries"] = after["prefix_cache_queries"] - before["prefix_cache_queries"]
    rows.append(("two-phase on vLLM", seconds, tp, cost))

    if not args.skip_study:
        prefix = list(clean.reply.token_ids[: clean.triggers[0].start]) if clean.triggers else list(clean.reply.token_ids)
        before = v.engine_stats()
        t0 = time.perf_counter()
        scost = study_splice(v, rendered.ids, prefix, list(subs), args.budget)
        seconds = time.perf_counter() - t0
        after = v.engine_stats()
        scost["prefix hits"] = after["prefix_cache_hits"] - before["prefix_cache_hits"]
        scost["prefix queries"] = after["prefix_cache_queries"] - before["prefix_cache_queries"]
        rows.append(("study's method on vLLM", seconds, None, scost))

    n = len(subs)
    reply_tokens = sum(len(t.reply.token_ids) for t in lock)
    assert not v.twin_loaded  # one model in memory: vLLM scored its own tokens
    print(f"\n{args.question} x {n} substitutes, budget {args.budget}; {reply_tokens} reply tokens in all (lockstep); {v.info.engine_version}, {v.info.dtype}")
    print(f"{'path':<24} {'seconds':>8} {'trials/s':>9} {'tok/s':>8} {'requests':>9} {'decoded':>9} {'prefilled':>10} {'prefix hits':>12} {'same':>6} {'full sweep':>11}")
    for name, s, trials, c in rows:
        same = "—" if trials is None else f"{sum(a.reply.token_ids == b.reply.token_ids for a, b in zip(lock, trials))}/{n}"
        hits = f"{c['prefix hits']:.0f}/{c['prefix queries']:.0f}" if "prefix hits" in c else "—"
        full = 100 * 101 / (n / s) / 3600
        print(f"{name:<24} {s:8.1f} {n / s:9.2f} {reply_tokens / s:8.1f} {c.get('requests', '—')!s:>9} {c.get('decoded', '—')!s:>9} "
              f"{c.get('prefilled', '—')!s:>10} {hits:>12} {same:>6} {full:9.2f} h")
    secs = {name: s for name, s, _, _ in rows}
    if "study's method on vLLM" in secs:
        ratio = secs["study's method on vLLM"] / secs["two-phase on vLLM"]
        print(f"two-phase on vLLM (no twin) is {ratio:.2f}x the study's method on the same engine")


if __name__ == "__main__":
    main()
