"""A second torch job with torch's defaults, to measure sleight beside one (the OpenMP trap).

    python benchmarks/busy.py --seconds 900 &     # then time the command under test beside it

It imports neither sleight nor anything that sets ``OMP_WAIT_POLICY``: torch's own thread pool and
wait policy, busy with float32 matrix products the size of a small model's layers, as another
user's job on the same cores would be. It prints its own rate when it stops.
"""

from __future__ import annotations

import argparse
import time


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=600.0, help="how long to keep the cores busy (default: 600)")
    ap.add_argument("--size", type=int, default=576, help="square matrix side (default: 576, SmolLM2-135M's width)")
    args = ap.parse_args()
    import torch

    a = torch.randn(64, args.size)
    w = torch.randn(args.size, args.size)
    n, t0 = 0, time.perf_counter()
    try:
        while time.perf_counter() - t0 < args.seconds:
            for _ in range(50):
                a = torch.tanh(a @ w)
            n += 50
    except KeyboardInterrupt:  # stopped by the measurement that needed it
        pass
    dt = time.perf_counter() - t0
    print(f"busy: {n} products of (64, {args.size}) x ({args.size}, {args.size}) in {dt:.0f} s, torch threads {torch.get_num_threads()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
