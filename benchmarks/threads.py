"""Torch threads x OpenMP wait policy, alone and beside a second copy: the 101-row tamper batch.

    python benchmarks/threads.py                                       # the full table (q005, budget 96)
    python benchmarks/threads.py --budget 6 --substitutes 4 --threads 1  # smoke, under a minute

Each cell runs in fresh processes, because ``OMP_WAIT_POLICY`` is read once, when torch loads.
"alone": one worker; "pair": two identical workers whose timed sections start together (a file
barrier after loading and warm-up), reported per copy and together. A worker times one hooked
tamper batch (rendered chat + the question's clean prefix, every row forced its own substitute,
the swap hook live) and reports tokens/s and a digest of the tokens, which must agree everywhere.
Run it on an otherwise idle machine: the figures are only as quiet as the machine.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def worker(args: argparse.Namespace) -> None:
    """One timed tamper batch; prints one JSON line."""
    import torch

    torch.set_num_threads(args.threads)
    from sleight.backends import load_model
    from sleight.cli.main import quiet_libraries
    from sleight.tamper import engine
    from sleight.tamper.data import load_questions, load_substitutes

    quiet_libraries()
    model = load_model(args.model)
    qs = {q.id: q.question for q in load_questions()[0]}
    subs = load_substitutes(limit=args.substitutes)[0]
    cfg = engine.TamperConfig(max_new_tokens=args.budget)
    clean = engine.clean_run(model, engine.render_question(model, qs[args.question]), cfg)
    fed: list[int] = []
    engine.batched_trials(model, clean, subs[: min(4, len(subs))], cfg)  # warm-up
    if args.barrier:
        Path(args.barrier, f"ready-{os.getpid()}").touch()
        while not Path(args.barrier, "go").exists():
            time.sleep(0.01)
    t0 = time.perf_counter()
    trials = engine.batched_trials(model, clean, subs, cfg, fed.append)
    s = time.perf_counter() - t0
    digest = hashlib.sha256(json.dumps([t.reply.token_ids for t in trials]).encode()).hexdigest()[:12]
    print(json.dumps({"tokens": sum(fed), "seconds": s, "tok_s": sum(fed) / s, "digest": digest, "threads": torch.get_num_threads()}), flush=True)


def run_cell(args: argparse.Namespace, threads: int, policy: str, copies: int) -> list[dict]:
    """``policy``: ``OMP_WAIT_POLICY``, with ``:N`` libgomp's ``GOMP_SPINCOUNT`` (how long a worker
    spins before it sleeps; unset: sleight's default, as the package sets it)."""
    wait, _, spin = policy.partition(":")
    env = {**os.environ, "OMP_WAIT_POLICY": wait}
    env.pop("GOMP_SPINCOUNT", None)
    if spin:
        env["GOMP_SPINCOUNT"] = spin
    cmd = [sys.executable, __file__, "--worker", "--threads", str(threads), "--model", args.model, "--question", args.question,
           "--budget", str(args.budget), "--substitutes", str(args.substitutes)]
    with tempfile.TemporaryDirectory() as barrier:
        procs = [subprocess.Popen(cmd + ["--barrier", barrier], env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True) for _ in range(copies)]
        while len(list(Path(barrier).glob("ready-*"))) < copies and all(p.poll() is None for p in procs):
            time.sleep(0.05)
        Path(barrier, "go").touch()
        outs = [p.communicate()[0] for p in procs]
    if any(p.returncode for p in procs):
        raise SystemExit(f"a worker failed (threads {threads}, {policy}, {copies} copies)")
    return [json.loads(o.strip().splitlines()[-1]) for o in outs]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--question", default="q005")
    ap.add_argument("--budget", type=int, default=96)
    ap.add_argument("--substitutes", type=int, default=101)
    ap.add_argument("--threads", default="1,2", help="comma-separated torch thread counts (default: 1,2)")
    ap.add_argument("--policies", default="ACTIVE,PASSIVE:0,PASSIVE",
                    help="comma-separated OMP_WAIT_POLICY values, each with an optional :GOMP_SPINCOUNT (default: ACTIVE,PASSIVE:0,PASSIVE)")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--barrier", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        args.threads = int(args.threads)
        worker(args)
        return 0

    print(f"{args.question}, {args.substitutes} rows, budget {args.budget}; tok/s of the timed tamper batch")
    print(f"{'threads':>7} {'policy:spins':>15} {'alone':>9} {'pair, each':>18} {'pair, together':>15}")
    digests = set()
    for t in [int(x) for x in args.threads.split(",") if x]:
        for policy in [p for p in args.policies.split(",") if p]:
            alone = run_cell(args, t, policy, 1)
            pair = run_cell(args, t, policy, 2)
            digests |= {r["digest"] for r in alone + pair}
            each = " / ".join(f"{r['tok_s']:.1f}" for r in pair)
            print(f"{t:>7} {policy:>15} {alone[0]['tok_s']:>9.1f} {each:>18} {sum(r['tok_s'] for r in pair):>15.1f}", flush=True)
    print(f"tokens identical in every cell: {'yes' if len(digests) == 1 else 'NO: ' + ', '.join(sorted(digests))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
