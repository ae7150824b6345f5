"""One decode step of a 101-row batch on transformers' DynamicCache against sleight's slab cache.

    python benchmarks/kv_cache.py                      # 101 rows, 300 cached columns, 8 steps
    python benchmarks/kv_cache.py --rows 8 --columns 64 --steps 2   # smoke, seconds

The same random prefix is computed once at batch 1, forked into ``--rows`` rows, then ``--steps``
greedy steps run on each cache. ``DynamicCache`` concatenates every layer's whole cache each step;
the slab (``sleight.backends.kv_slab``) writes the new column in place. Printed: seconds a step for
each, the ratio, and whether the two caches' logits are bit-identical.
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=101)
    ap.add_argument("--columns", type=int, default=300)
    ap.add_argument("--steps", type=int, default=8)
    args = ap.parse_args(argv)

    import torch

    from sleight.backends import load_model
    from sleight.backends.hf import _repeat_cache
    from sleight.backends.kv_slab import SlabCache
    from sleight.cli.main import quiet_libraries

    quiet_libraries()
    m = load_model()
    ids = torch.randint(100, 5000, (1, args.columns), generator=torch.Generator().manual_seed(0))
    got = {}
    for name, new in (("DynamicCache", lambda: None), ("slab", SlabCache)):
        _, cache = m._forward(ids, torch.ones_like(ids), torch.arange(args.columns)[None], new(), last_only=True)
        cache = _repeat_cache(cache, args.rows)
        feed = torch.randint(100, 5000, (args.rows, 1), generator=torch.Generator().manual_seed(1))
        logits = []
        t = time.perf_counter()
        for k in range(args.steps):
            mask = torch.ones((args.rows, args.columns + 1 + k), dtype=torch.long)
            out, cache = m._forward(feed, mask, torch.full((args.rows, 1), args.columns + k), cache, last_only=True)
            logits.append(out[:, -1])
            feed = out[:, -1].argmax(-1, keepdim=True)
        got[name] = ((time.perf_counter() - t) / args.steps, torch.stack(logits))
        print(f"{name:12s} {got[name][0]:.3f} s a step ({args.rows} rows, {args.columns} cached columns)", flush=True)
    (a, la), (b, lb) = got["DynamicCache"], got["slab"]
    print(f"slab: {a / b:.2f}x DynamicCache's speed; logits bit-identical: {torch.equal(la, lb)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
