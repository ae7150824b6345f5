"""A small sweep on a local Ray cluster, timed alone or beside another torch job, with the CPU its
tasks got against the job's: the measurement behind ``sleight.tamper.sweep.execute.local_cluster_env``.

    python benchmarks/ray_sweep.py                    # alone, then beside a load, tasks at sleight's niceness (0)
    python benchmarks/ray_sweep.py --niceness 15      # the same with Ray's default worker niceness
    python benchmarks/ray_sweep.py --no-alone --questions 2   # beside the load only, smaller

The load is ``benchmarks/busy.py`` as a pytest-xdist worker of this repo runs torch (2 threads,
``OMP_WAIT_POLICY=PASSIVE``, ``GOMP_SPINCOUNT=0``). Ray nices its workers by 15 unless told
otherwise, so a sweep's tasks beside such a job get a few per cent of a core each. Measured on
2 cores (AVX2), the defaults here: at niceness 15, 19.5 s alone, 71.0 s beside the load (the
workers 0.50 cores, the load 1.39); at sleight's 0, 21.7 s alone, 31.2 s beside it (0.95, 0.86).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
TASK = re.compile(r"ray::|default_worker\.py")
HZ = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of a live process (0 once it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / HZ


def task_pids() -> dict[int, int]:
    """Ray worker pids -> their niceness."""
    out = {}
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                cmd = (p / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                if TASK.search(cmd):
                    out[int(p.name)] = int((p / "stat").read_text().rsplit(")", 1)[1].split()[16])
            except (OSError, IndexError, ValueError):
                continue
    return out


def sweep(args: argparse.Namespace, load: bool) -> str:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    if args.niceness is not None:
        env["RAY_worker_niceness"] = str(args.niceness)
    busy = None
    if load:
        load_env = {**os.environ, "OMP_NUM_THREADS": "2", "OMP_WAIT_POLICY": "PASSIVE", "GOMP_SPINCOUNT": "0"}
        busy = subprocess.Popen(
            [sys.executable, str(HERE / "busy.py"), "--seconds", "3600"], env=load_env, stdout=subprocess.PIPE, text=True
        )
        time.sleep(5)  # torch imported, products running
    with tempfile.TemporaryDirectory() as tmp:
        argv = [sys.executable, "-m", "sleight.cli.main", "tamper", "sweep", "--models", args.model, "--shards", str(args.shards),
                "--questions", str(args.questions), "--substitutes", str(args.substitutes),
                "--max-new-tokens", str(args.max_new_tokens), "--no-progress", "--out", str(Path(tmp) / "sweep")]  # fmt: skip
        load0 = cpu_s(busy.pid) if busy else 0.0
        t0 = time.perf_counter()
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        seen: dict[int, float] = {}
        nice: set[int] = set()
        while proc.poll() is None:
            for pid, n in task_pids().items():
                seen[pid] = max(seen.get(pid, 0.0), cpu_s(pid))
                nice.add(n)  # a worker starts at the raylet's and nices itself
            time.sleep(0.25)
        wall = time.perf_counter() - t0
        out, err = proc.communicate()
    load_cpu = cpu_s(busy.pid) - load0 if busy else 0.0
    if busy:
        busy.terminate()
        busy.wait()
    if proc.returncode:
        raise SystemExit(f"the sweep failed ({proc.returncode}):\n{out}{err}")
    tasks = sum(seen.values())
    where = "beside the load" if load else "alone"
    share = f", the load {load_cpu / wall:.2f}" if load else ""
    return f"{where:>15}: {wall:6.1f} s; Ray workers' niceness {max(nice, default='-')}; CPU cores used: the workers {tasks / wall:.2f}{share}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--shards", type=int, default=2)
    ap.add_argument("--questions", type=int, default=3)
    ap.add_argument("--substitutes", type=int, default=3)
    ap.add_argument("--max-new-tokens", type=int, default=16)
    ap.add_argument(
        "--niceness", type=int, default=None, help="RAY_worker_niceness for the sweep (default: sleight's, 0; Ray's own is 15)"
    )
    ap.add_argument("--no-alone", action="store_true", help="only the run beside the load")
    ap.add_argument("--no-load", action="store_true", help="only the run alone")
    args = ap.parse_args()
    label = "sleight's (0)" if args.niceness is None else str(args.niceness)
    print(
        f"ray sweep: {args.model}, {args.shards} shard(s), {args.questions} questions x {args.substitutes} substitutes; worker niceness {label}"
    )
    for load in [x for x, skip in ((False, args.no_alone), (True, args.no_load)) if not skip]:
        print(sweep(args, load), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
