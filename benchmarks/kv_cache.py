"""One decode step of a 101-row batch on transformers' DynamicCache, sleight's slab cache (with and
without masked holes) and sleight's ragged batch (issue 28).

    python benchmarks/kv_cache.py                      # 101 rows, 300 cached columns, 8 steps
    python benchmarks/kv_cache.py --rows 8 --columns 64 --steps 2   # smoke, seconds

The same random prefix is computed once at batch 1, forked into ``--rows`` rows, then ``--steps``
greedy steps run on each cache. ``DynamicCache`` concatenates every layer's whole cache each step;
the slab (``sleight.backends.kv_slab``) writes the new column in place; "slab, holes" is the slab
with ``--holes`` masked columns a row (what a hook's retractions left behind before ragged
batches: any mask sends transformers' SDPA through ``repeat_kv``); "ragged, own" holds every row's
columns as its own (``sleight.backends.ragged``, no mask); "ragged, shared" holds the prefix once
for all rows, as a question's trial rows do. Printed: seconds a step for each, the ratio to the
slab, and how far each one's logits are from the slab's (bit-identical, or the largest difference;
the holes case masks real columns, so its logits differ by design).
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
import sleight  # noqa: E402,F401  its OpenMP settings, before torch loads (sleight/__init__.py)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=101)
    ap.add_argument("--columns", type=int, default=300)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--holes", type=int, default=8, help="masked columns a row in the 'slab, holes' case")
    args = ap.parse_args(argv)

    import torch

    from sleight.backends import load_model
    from sleight.backends.cache_ops import repeat_cache
    from sleight.backends.kv_slab import SlabCache
    from sleight.backends.ragged import Prefix, RaggedCache
    from sleight.cli.main import quiet_libraries

    quiet_libraries()
    m = load_model()
    rows, cols = args.rows, args.columns
    ids = torch.randint(100, 5000, (1, cols), generator=torch.Generator().manual_seed(0))
    _, base = m.forward(ids, torch.ones_like(ids), torch.arange(cols)[None], SlabCache(), last_only=True)
    kv = [(layer.keys.clone(), layer.values.clone()) for layer in base.layers]
    holes = torch.ones((rows, cols), dtype=torch.long)
    if args.holes:
        pick = torch.randperm(cols - 1, generator=torch.Generator().manual_seed(2))[: args.holes] + 1
        holes[:, pick] = 0

    def rect(new, mask):
        def run():
            _, cache = m.forward(ids, torch.ones_like(ids), torch.arange(cols)[None], new(), last_only=True)
            cache = repeat_cache(cache, rows)
            return lambda feed, k: m.forward(feed, torch.cat([mask, torch.ones((rows, k + 1), dtype=torch.long)], 1),
                                              torch.full((rows, 1), cols + k), cache, last_only=True)[0]
        return run

    def ragged(shared):
        def run():
            cache = RaggedCache(len(kv))
            if shared:
                cache.add(Prefix([k for k, _ in kv], [v for _, v in kv]), [0] * rows, kv[0][0])
            else:
                cache.add(None, [cols] * rows, kv[0][0], [k.expand(rows, -1, -1, -1) for k, _ in kv], [v.expand(rows, -1, -1, -1) for _, v in kv])

            def step(feed, k):
                pos = torch.tensor(cache.positions())[:, None]
                cache.begin_step()
                out = m.forward(feed, None, pos, cache, last_only=True)[0]
                cache.end_step()
                return out
            return step
        return run

    cases = [("DynamicCache", rect(lambda: None, torch.ones((rows, cols), dtype=torch.long))), ("slab", rect(SlabCache, torch.ones((rows, cols), dtype=torch.long))),
             (f"slab, {args.holes} holes", rect(SlabCache, holes)), ("ragged, own", ragged(False)), ("ragged, shared", ragged(True))]
    got = {}
    for name, make in cases:
        step = make()
        feed = torch.randint(100, 5000, (rows, 1), generator=torch.Generator().manual_seed(1))
        logits = []
        t = time.perf_counter()
        for k in range(args.steps):
            out = step(feed, k)
            logits.append(out[:, -1])
            feed = out[:, -1].argmax(-1, keepdim=True)
        got[name] = ((time.perf_counter() - t) / args.steps, torch.stack(logits))
        print(f"{name:16s} {got[name][0]:.3f} s a step ({rows} rows, {cols} cached columns)", flush=True)
    slab_s, slab_l = got["slab"]
    for name, (sec, lg) in got.items():
        same = "bit-identical" if torch.equal(lg, slab_l) else f"max |d logit| {float((lg - slab_l).abs().max()):.2e}"
        print(f"{name:16s} {slab_s / sec:.2f}x the slab's speed; logits vs the slab: {same}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
