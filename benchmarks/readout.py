"""Readout audit throughput: items/s for the forecast preset on the default model.

Run:  python benchmarks/readout.py [--items 4] [--variants all] [--threads N] [--naive]

Each item is read under every variant (12 by default): per context one pass that reads its scored
position and scores its options' later tokens (``read_scored`` on hf: mass in context / isolated /
divergent, every option's full log-probability) and one batched
greedy decode per item (argmax, top tokens, 16-token continuation). ``--naive`` also times the
three-separate-passes way (next-token pass + option scoring + a greedy decode, each context on its
own) on the same contexts, for the ratio.
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--items", type=int, default=4, help="forecast fixture items (default: 4)")
    parser.add_argument("--variants", default="all", help="comma-separated variants (default: all 12)")
    parser.add_argument("--threads", type=int, help="torch CPU threads (default: torch's choice)")
    parser.add_argument("--naive", action="store_true", help="also time three separate passes per context")
    parser.add_argument("--model", default="smollm2-135m-instruct")
    args = parser.parse_args()

    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    from sleight.backends import load_model
    from sleight.readout.audit.measure import measure, prepare
    from sleight.readout.audit.presets import FORECAST_STEM, preset_items
    from sleight.readout.audit.variants import parse_variants

    model = load_model(args.model)
    items = preset_items("forecast", limit=args.items)
    variants = parse_variants(args.variants)
    measure(model, items[:1], ("original",), stem=FORECAST_STEM)  # warm-up

    start = time.perf_counter()
    rows = measure(model, items, variants, stem=FORECAST_STEM)
    took = time.perf_counter() - start
    n_ctx = sum(not r["skipped"] for r in rows)
    tokens = sum(r["n_context_tokens"] or 0 for r in rows)
    print(f"model {model.info.model_id} ({model.info.engine}, {model.info.device}, torch threads {torch.get_num_threads()})")
    print(f"forecast preset: {len(items)} items x {len(variants)} variants = {n_ctx} contexts, {tokens} context tokens")
    print(f"audit readings: {took:.1f} s -> {len(items) / took:.3f} items/s, {n_ctx / took:.2f} contexts/s")

    if args.naive:
        prepared = [prepare(model, it, v, FORECAST_STEM) for it in items for v in variants]
        prepared = [p for p in prepared if p.skip is None]
        start = time.perf_counter()
        for p in prepared:
            model.next_token_logprobs([p.ids])
            kept = [e for e in p.enc if e is not None]
            if kept:
                model.continuation_logprobs(p.ids, kept)
            model.greedy([p.ids], 16)
        naive = time.perf_counter() - start
        print(f"naive (3 passes per context, one context at a time): {naive:.1f} s -> {len(items) / naive:.3f} items/s; audit is {naive / took:.2f}x faster")


if __name__ == "__main__":
    main()
