"""The engine's numerical noise: the same readings by different batch compositions and CPU kernels.

    python benchmarks/noise.py                  # every kernel set this CPU offers, one process each
    python benchmarks/noise.py --kernels avx2   # one kernel set
    python benchmarks/noise.py --list-kernels   # the kernel sets this CPU offers

A float32 forward pass gives slightly different numbers for the same context when the batch around
it changes (padding, group size, a forked cache) and when torch picks another kernel set
(``ATEN_CPU_CAPABILITY``: ``default``, ``avx2``, ``avx512``; forcing ``avx512`` on a CPU without
AVX-512 dies with SIGILL, so only the sets the CPU offers are run). Per kernel set, in a fresh process, this reads each context of a fixed set
(chat prompts of mixed lengths and their greedy replies):

* at the next position: alone, in one left-padded batch of all contexts, and in groups of 2 and 3
  (``read_next``); and the lockstep decoder's own records of the same tokens (``greedy``);
* teacher-forced over the replies: one reply per pass and all replies in one pass (``score_tokens``),
  and ``continuation_logprobs``;

and prints, per quantity, the largest absolute difference from the read-alone value: a token's
log-prob, a probability mass (the top-4 and the asked tokens' probabilities summed), the full
entropy. ``tests/tolerances.py`` takes its named tolerances from the worst case of these figures.
Nothing here is timed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

QUESTIONS = [
    "What is the capital of France?",
    "Why is the sky blue? Explain it to a child in two sentences.",
    "Name three primary colors.",
    "Who wrote the novel Pride and Prejudice, and in which century was it published?",
    "What is 7 times 8?",
]
KERNELS = ("default", "avx2", "avx512")
KERNEL_FLAGS = {"default": set(), "avx2": {"avx2", "fma"}, "avx512": {"avx512f", "avx512bw", "avx512vl", "avx512dq"}}


def offered_kernels() -> list[str]:
    """The kernel sets this CPU can run (forcing ``avx512`` on a CPU without it dies with SIGILL)."""
    try:
        with open("/proc/cpuinfo") as fh:
            flags = next((set(line.split(":", 1)[1].split()) for line in fh if line.startswith("flags")), set())
    except OSError:
        flags = set()
    return [k for k in KERNELS if KERNEL_FLAGS[k] <= flags]


def worker(budget: int) -> dict[str, float]:
    """One kernel set (this process's ``ATEN_CPU_CAPABILITY``): the largest difference per quantity."""
    import numpy as np

    from sleight.backends import load_model

    m = load_model()
    prompts = [m.render_chat([{"role": "user", "content": q}]).ids for q in QUESTIONS]
    replies = [g.token_ids for g in m.greedy(prompts, budget)]
    asked = [m.encode(" Paris") + m.encode(" blue") + m.encode(" The") for _ in prompts]
    worst = {"logprob": 0.0, "mass": 0.0, "entropy": 0.0}

    def note(kind: str, a, b) -> None:
        worst[kind] = max(worst[kind], float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64)))))

    def mass(r) -> float:
        return float(np.exp(r.logprobs).sum() + np.exp(r.top_logprobs[:4]).sum())

    # Next-position reads of every prefix of every reply (mixed lengths), alone vs batched.
    seqs = [p + r[:k] for p, r in zip(prompts, replies) for k in range(0, len(r), max(1, len(r) // 6))]
    want = [asked[0]] * len(seqs)
    m.batch_size = 1
    alone = m.read_next(seqs, want)
    for size in (2, 3, len(seqs)):
        m.batch_size = size
        for a, b in zip(alone, m.read_next(seqs, want)):
            note("logprob", a.logprobs, b.logprobs)
            note("logprob", a.top_logprobs, b.top_logprobs)
            note("mass", mass(a), mass(b))
            note("entropy", a.entropy, b.entropy)
    m.batch_size = 128
    # The decoder's own records vs the same tokens scored alone, one reply per pass and all at once.
    gens = m.greedy(prompts, budget)
    for p, r, g in zip(prompts, replies, gens):
        one = m.score_tokens(p, [r])[0]
        note("logprob", one.logprobs, g.logprobs)
        note("entropy", one.entropy, g.entropy)
        note("mass", np.exp(one.top_logprobs[:, :4]).sum(1), np.exp(g.top_logprobs[:, :4]).sum(1))
        cont = m.continuation_logprobs(p, [r])[0]
        note("logprob", cont, one.logprobs)
    ctx = prompts[0]
    tails = [r[:n] for r in replies for n in (len(r) // 2, len(r)) if n]
    together = m.score_tokens(ctx, tails)
    for t, s in zip(tails, together):
        one = m.score_tokens(ctx, [t])[0]
        note("logprob", one.logprobs, s.logprobs)
        note("entropy", one.entropy, s.entropy)
    return worst


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kernels", default=None, help="kernel sets to run (default: every one this CPU offers)")
    ap.add_argument("--list-kernels", action="store_true", help="print the kernel sets this CPU offers and exit")
    ap.add_argument("--budget", type=int, default=48, help="greedy tokens per reply (default: 48)")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(worker(args.budget)))
        return
    if args.list_kernels:
        print(" ".join(offered_kernels()))
        return
    import torch

    rows = []
    for kernel in args.kernels.split(",") if args.kernels else offered_kernels():
        env = dict(os.environ, ATEN_CPU_CAPABILITY=kernel)
        out = subprocess.run([sys.executable, __file__, "--worker", "--budget", str(args.budget)], env=env, capture_output=True, text=True)
        if out.returncode:
            sys.exit(f"{kernel}: {out.stderr[-2000:]}")
        probe = [sys.executable, "-c", "import torch; print(torch.backends.cpu.get_cpu_capability())"]
        ran = subprocess.run(probe, env=env, capture_output=True, text=True).stdout.strip()
        rows.append((kernel, ran, json.loads(out.stdout.strip().splitlines()[-1])))
    print(f"torch {torch.__version__}; largest |difference| from the read-alone value")
    print(f"{'ATEN_CPU_CAPABILITY':>20} {'ran as':>8} {'log-prob':>10} {'mass':>10} {'entropy':>10}")
    for kernel, ran, w in rows:
        print(f"{kernel:>20} {ran:>8} {w['logprob']:10.2e} {w['mass']:10.2e} {w['entropy']:10.2e}")
    worst = {k: max(w[k] for _, _, w in rows) for k in ("logprob", "mass", "entropy")}
    print(f"{'worst':>20} {'':>8} {worst['logprob']:10.2e} {worst['mass']:10.2e} {worst['entropy']:10.2e}")


if __name__ == "__main__":
    main()
