"""The bundled model's forward pass in each weights' dtype on this machine: a prefill and a one-token pass.

    python benchmarks/dtype.py                 # float32, bfloat16, float16; 300 tokens
    python benchmarks/dtype.py --tokens 64     # smoke

A CPU without float16/bfloat16 matrix units runs a 16-bit prefill (compute bound) several times
slower than float32, while a one-token pass (bound by reading the weights) is faster in 16 bits:
what a table pinned to the paper's float16 costs to reproduce on a CPU.
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
import sleight  # noqa: E402,F401  its OpenMP settings, before torch loads


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--tokens", type=int, default=300)
    ap.add_argument("--dtypes", default="float32,bfloat16,float16")
    args = ap.parse_args(argv)

    import torch

    from sleight.backends import load_model
    from sleight.cli.main import quiet_libraries

    quiet_libraries()
    print(f"torch {torch.__version__}, kernels {torch.backends.cpu.get_cpu_capability()}, threads {torch.get_num_threads()}")
    for dtype in args.dtypes.split(","):
        m = load_model(args.model, dtype=dtype)
        n = args.tokens
        ids = torch.randint(100, 40000, (1, n), generator=torch.Generator().manual_seed(0))
        mask, pos = torch.ones_like(ids), torch.arange(n)[None]
        m.forward(ids[:, :16], mask[:, :16], pos[:, :16], last_only=True)  # warm-up
        t = time.perf_counter()
        m.forward(ids, mask, pos, last_only=True)
        prefill = time.perf_counter() - t
        t = time.perf_counter()
        for _ in range(5):
            m.forward(ids[:, :1], mask[:, :1], pos[:, :1], last_only=True)
        one = (time.perf_counter() - t) / 5
        print(f"{dtype:9s} prefill {n} tokens {prefill:.2f} s ({n / prefill:.0f} tokens/s); one-token pass {one * 1000:.0f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
