"""Decode throughput of the hf engine against its ceiling, in one process on one model.

    python benchmarks/decode.py                                  # the full run (q005, budget 256)
    python benchmarks/decode.py --budget 8 --batches 1,4 --substitutes 4 --threads-list 1   # smoke, seconds

Measured, each after a warm-up, all on the same prompts:

1. ``transformers.generate`` (greedy, batch 1): the library's own loop.
2. The engine's ``greedy`` at batch 1, 8, 32 and 101 on one prompt repeated (rendered chat + the
   question's clean prefix), unhooked; and hooked: the tamper batch itself (each row forced its own
   substitute, the swap hook live), at the same batch sizes.
3. A minimal hand-written KV-cache loop (the prefix once, its cache forked, argmax only, rows
   dropped at end-of-sequence): the ceiling for the unhooked rows above. For the hooked tamper
   batch the ceiling is the same loop replaying that batch's final tokens row by row (rows leave
   when their reply ends, as in the engine): the same work without records, hooks or edits.
4. Two-phase decoding against lockstep on the same tamper trials: time, identical trials, record
   differences.
5. 1 vs N torch threads for the 101-row rates (``--threads-list``).

Printed: tokens/s for each, the engine's 101-row rate as a fraction of the ceiling, and the
projected time of the full 100 x 101 x 256 sweep of the default model at the hooked 101-row rate
(upper bound: every trial decodes its whole budget after its prefix; and at the tokens per trial
measured here). Rates are tokens produced per second; the hooked batch and its replay are both
counted by the batch's final reply tokens.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
import sleight  # noqa: E402,F401  its OpenMP settings, before torch loads (sleight/__init__.py)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--question", default="q005", help="question id whose clean prefix and tamper batch are used (default: q005)")
    ap.add_argument("--budget", type=int, default=256, help="reply budget (default: 256)")
    ap.add_argument("--batches", default="1,8,32,101", help="batch sizes (default: 1,8,32,101)")
    ap.add_argument("--substitutes", type=int, default=101, help="substitutes of the tamper batch (default: 101)")
    ap.add_argument("--threads-list", default=f"1,{os.cpu_count() or 1}", help="torch thread counts for the largest batch (default: 1,<cores>)")
    ap.add_argument("--skip-two-phase", action="store_true")
    ap.add_argument("--full-questions", type=int, default=100)
    ap.add_argument("--full-trials-per-question", type=int, default=101)
    args = ap.parse_args(argv)

    import numpy as np
    import torch

    from sleight.backends import load_model
    from sleight.cli.main import quiet_libraries
    from sleight.tamper import engine, two_phase
    from sleight.tamper.data import load_questions, load_substitutes

    quiet_libraries()
    batches = [int(b) for b in args.batches.split(",") if b]
    threads_list = [int(t) for t in args.threads_list.split(",") if t]
    model = load_model(args.model)
    qs = {q.id: q.question for q in load_questions()[0]}
    subs = load_substitutes(limit=args.substitutes)[0]
    cfg = engine.TamperConfig(max_new_tokens=args.budget)
    rendered = engine.render_question(model, qs[args.question])
    clean = engine.clean_run(model, rendered, cfg)
    if not clean.triggers:
        raise SystemExit(f"{args.question} has no trigger within {args.budget} tokens: pick another --question")
    prefix = clean.reply.token_ids[: clean.triggers[0].start]
    prompt = list(rendered.ids) + prefix
    room = args.budget - len(prefix)
    print(f"model {model.info.model_id} ({model.info.device}, {model.info.dtype}); OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY')}, GOMP_SPINCOUNT={os.environ.get('GOMP_SPINCOUNT')}")
    print(f"{args.question}: prompt {len(rendered.ids)} tokens + clean prefix {len(prefix)}, {room} tokens left of the budget {args.budget}")

    def timed(fn):
        fn()  # warm-up (allocator, kernels)
        t0 = time.perf_counter()
        n = fn()
        return n, time.perf_counter() - t0

    def counted(run):
        def go():
            fed = []
            run(fed.append)
            return sum(fed)
        return go

    def replay(b):
        """The tamper batch's final replies (after the prefix), to feed the minimal loop."""
        trials = engine.batched_trials(model, clean, subs[:b], cfg)
        return [(t.reply.token_ids[len(prefix):], t.reply.finish_reason) for t in trials]

    def tamper_batch(b, hooked):
        firsts = [engine.plan_substitution(prefix, clean.triggers[0], s, model, cfg) for s in subs[:b]]
        hook = engine.SwapHook(model, prefix, subs[:b], cfg, injected=[[False] * len(prefix) + [True] * len(f.ids) for f in firsts]) if hooked else None
        return lambda tick: model.greedy([prompt] * b, room, hook=hook, forced=[list(f.ids) for f in firsts], top_k=cfg.top_k, progress=tick)

    def report(name, n, s):
        print(f"  {name:<44} {n:>8} tok {s:>8.2f} s {n / s:>9.1f} tok/s", flush=True)

    threads0 = torch.get_num_threads()
    print(f"\ntorch threads {threads0}")
    ids = torch.tensor([prompt])
    n, s = timed(lambda: int(model.model.generate(ids, max_new_tokens=room, do_sample=False).shape[1] - len(prompt)))
    report("transformers.generate, batch 1", n, s)
    hooked: dict[int, float] = {}
    rates: dict[int, tuple[float, float, float, float]] = {}  # batch -> unhooked, minimal, hooked, replay
    for b in batches:
        n, s = timed(counted(lambda tick, b=b: model.greedy([prompt] * b, room, top_k=cfg.top_k, progress=tick)))
        report(f"engine greedy, unhooked, batch {b}", n, s)
        unhooked = n / s
        n, s = timed(counted(lambda tick, b=b: minimal_loop(model, prompt, b, room, tick)))
        report(f"minimal KV-cache argmax loop, batch {b}", n, s)
        minimal = n / s
        if b <= len(subs):
            _, s_h = timed(counted(tamper_batch(b, True)))
            rows_b = replay(b)
            n, s = timed(counted(lambda tick, r=rows_b: replay_loop(model, prompt, r, tick)))
            report(f"engine greedy, hooked tamper batch, batch {b}", n, s_h)
            report(f"minimal loop replaying its tokens, batch {b}", n, s)
            hooked[b] = n / s_h
            rates[b] = (unhooked, minimal, n / s_h, n / s)  # hooked and replay: the same reply tokens

    big = max(b for b in batches if b <= len(subs))
    per_thread: dict[int, tuple[float, float, float, float]] = {threads0: rates[big]}  # measured above
    rows_big = replay(big)
    for t in (t for t in threads_list if t != threads0):
        torch.set_num_threads(t)
        n1, s1 = timed(counted(lambda tick: model.greedy([prompt] * big, room, top_k=cfg.top_k, progress=tick)))
        n2, s2 = timed(counted(lambda tick: minimal_loop(model, prompt, big, room, tick)))
        _, s3 = timed(counted(tamper_batch(big, True)))
        n4, s4 = timed(counted(lambda tick: replay_loop(model, prompt, rows_big, tick)))
        per_thread[t] = (n1 / s1, n2 / s2, n4 / s3, n4 / s4)  # hooked and replay: the same reply tokens
    torch.set_num_threads(threads0)
    print(f"\n{big}-row rates by torch threads (tok/s): unhooked  minimal  hooked  replay   unhooked/minimal  hooked/replay")
    for t, (u, m, h, r) in per_thread.items():
        print(f"  threads {t:<3} {u:>29.1f} {m:>8.1f} {h:>7.1f} {r:>7.1f} {u / m:>18.3f} {h / r:>14.3f}")

    hooked_rate = per_thread[threads0][2] if threads0 in per_thread else hooked[big]
    if not args.skip_two_phase:
        k = min(big, len(subs))
        t0 = time.perf_counter()
        lock = engine.batched_trials(model, clean, subs[:k], cfg)
        t_lock = time.perf_counter() - t0
        t0 = time.perf_counter()
        clean2 = two_phase.clean_run(model, rendered, cfg)
        tp = two_phase.batched_trials(model, clean2, subs[:k], cfg)
        t_tp = time.perf_counter() - t0
        same = sum(a.reply.token_ids == b.reply.token_ids for a, b in zip(lock, tp))
        diffs = [float(np.abs(a.reply.logprobs - b.reply.logprobs).max()) for a, b in zip(lock, tp) if a.reply.token_ids == b.reply.token_ids and a.reply.token_ids]
        cost = {f: sum(getattr(t.cost, f) for t in tp) for f in ("requests", "decoded", "prefilled")}
        rounds = max(t.cost.requests for t in tp)
        print(f"\ntwo-phase vs lockstep on {k} trials of {args.question}: lockstep {t_lock:.2f} s, two-phase {t_tp:.2f} s (clean run included); "
              f"{same}/{k} trials identical, max |d logprob| {max(diffs, default=0.0):.2e}, argmax disagreements {sum(t.disagreements for t in tp)}")
        print(f"  two-phase per trial: requests {cost['requests'] / k:.2f}, tokens decoded {cost['decoded'] / k:.1f}, "
              f"tokens prefilled {cost['prefilled'] / k:.1f}; rounds for the question {rounds + 1}")
        per_trial = sum(len(t.reply.token_ids) - len(prefix) for t in lock) / k
    else:
        per_trial = float(room)
    for t, (u, m, h, r) in per_thread.items():
        print(f"\nengine {big}-row rate as a fraction of the minimal loop's (threads {t}): unhooked {u / m:.3f}, "
              f"hooked tamper batch {h / r:.3f} (of the loop replaying its tokens)")
    trials = args.full_questions * args.full_trials_per_question
    print(f"projected full sweep ({args.full_questions} x {args.full_trials_per_question} x {args.budget}) at the hooked {big}-row rate "
          f"{hooked_rate:.1f} tok/s: {trials * args.budget / hooked_rate / 3600:.2f} h if every trial decodes {args.budget} tokens; "
          f"{trials * per_trial / hooked_rate / 3600:.2f} h at the {per_trial:.1f} tokens per trial decoded here")
    return 0


def minimal_loop(model, prompt, batch, steps, tick) -> None:
    """The ceiling: the prompt once at batch 1, its cache forked, then argmax and feed, nothing else
    (no records, no hooks); a row leaves at end-of-sequence."""
    import torch

    from sleight.backends.cache_ops import repeat_cache, select_cache

    hf = model.model
    eos = torch.tensor(sorted(model.eos_ids))
    with torch.inference_mode():
        out = hf(input_ids=torch.tensor([prompt[:-1]]), use_cache=True, logits_to_keep=1)
        cache = repeat_cache(out.past_key_values, batch, copy=False)
        n = len(prompt) - 1
        feed = torch.tensor([[prompt[-1]]] * batch)
        mask = torch.ones((batch, n + 1), dtype=torch.long)
        for _ in range(steps):
            out = hf(input_ids=feed, attention_mask=mask, position_ids=(mask.sum(-1) - 1)[:, None], past_key_values=cache, use_cache=True, logits_to_keep=1)
            cache = out.past_key_values
            tick(int(feed.shape[0]))
            nxt = out.logits[:, -1, :].argmax(-1)
            keep = ~torch.isin(nxt, eos)
            if not bool(keep.any()):
                break
            if not bool(keep.all()):
                idx = keep.nonzero()[:, 0]
                cache = select_cache(cache, idx)
                mask, nxt = mask[idx], nxt[idx]
            feed = nxt[:, None]
            mask = torch.cat([mask, torch.ones((mask.shape[0], 1), dtype=torch.long)], 1)


def replay_loop(model, prompt, rows, tick) -> None:
    """The minimal loop fed given replies: per step one forward pass over the live rows, each fed
    its next reply token (a row whose reply ended by end-of-sequence is fed all its tokens, one that
    hit the budget all but its last); ``tick`` counts the reply tokens produced."""
    import torch

    from sleight.backends.cache_ops import repeat_cache, select_cache

    hf = model.model
    feeds = [list(toks) if fin == "stop" else list(toks[:-1]) for toks, fin in rows]
    with torch.inference_mode():
        out = hf(input_ids=torch.tensor([prompt[:-1]]), use_cache=True, logits_to_keep=1)
        cache = repeat_cache(out.past_key_values, len(rows), copy=False)
        live = list(range(len(rows)))
        nxt = [prompt[-1]] * len(rows)
        mask = torch.ones((len(rows), len(prompt)), dtype=torch.long)
        step = 0
        while live:
            out = hf(input_ids=torch.tensor(nxt)[:, None], attention_mask=mask, position_ids=(mask.sum(-1) - 1)[:, None],
                     past_key_values=cache, use_cache=True, logits_to_keep=1)
            cache = out.past_key_values
            out.logits[:, -1, :].argmax(-1)  # the one read a decoder makes per step
            tick(sum(1 for r in live if step < len(rows[r][0])))
            keep = [b for b, r in enumerate(live) if step < len(feeds[r])]
            if not keep:
                break
            if len(keep) < len(live):
                idx = torch.tensor(keep)
                cache = select_cache(cache, idx)
                mask = mask[idx]
                live = [live[b] for b in keep]
            nxt = [feeds[r][step] for r in live]
            mask = torch.cat([mask, torch.ones((len(live), 1), dtype=torch.long)], 1)
            step += 1


if __name__ == "__main__":
    sys.exit(main())
