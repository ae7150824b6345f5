"""The served path against in-process vLLM on the same work: one question's trials, two-phase, as
``sleight tamper run`` decodes them on each engine (issue #36).

    python benchmarks/served.py                                  # q005 x 101 substitutes, budget 256
    python benchmarks/served.py --substitutes 4 --budget 32      # smoke, about two minutes

1. **vLLM in process** (``--engine vllm``): the clean run, then every trial on the two-phase path.
2. **vLLM's OpenAI server** serving the same folder with the same engine settings (float32, eager,
   prefix caching, block size 32, the same KV cache), started here on loopback after the in-process
   engine is closed, and read through ``--model openai:<url>#subject`` with ``--in-flight`` requests
   at most: the same two calls, every request over HTTP (token ids, top-20 log-probs).

Printed per path: seconds, trials/s, reply tokens/s, requests, whether its trials equal the
in-process ones token for token, the projected full sweep (100 x 101 trials at this rate), and the
served path's throughput as a fraction of in process (the issue asks for at least 0.7). Run it
alone on the machine: the two paths share its cores with nothing else.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(path: str, kv_gib: int, log: Path) -> tuple[subprocess.Popen, str]:
    """vLLM's OpenAI server over ``path`` with the in-process engine's CPU settings; waits until ready."""
    port = free_port()
    cmd = [
        sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", path, "--served-model-name", "subject",
        "--host", "127.0.0.1", "--port", str(port), "--dtype", "float32", "--enforce-eager", "--enable-prefix-caching",
        "--block-size", "32", "--max-logprobs", "20", "--seed", "0",
    ]  # fmt: skip
    env = dict(os.environ, PYTHONUNBUFFERED="1", VLLM_CPU_KVCACHE_SPACE=str(kv_gib))
    proc = subprocess.Popen(cmd, stdout=log.open("wb"), stderr=subprocess.STDOUT, env=env)
    base = f"http://127.0.0.1:{port}/v1"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"vLLM's server exited {proc.returncode}; see {log}")
        try:
            with urllib.request.urlopen(base + "/models", timeout=2):
                return proc, base
        except OSError:
            time.sleep(1)
    proc.kill()
    raise SystemExit(f"vLLM's server did not answer in 300 s; see {log}")


def timed(model, rendered, subs, cfg):
    from sleight.tamper import two_phase

    model.generate_until([rendered.ids], 4)  # warm-up
    t0 = time.perf_counter()
    clean = two_phase.clean_run(model, rendered, cfg)
    trials = two_phase.batched_trials(model, clean, subs, cfg)
    seconds = time.perf_counter() - t0
    requests = 1 + sum(t.cost.requests for t in trials if t.cost is not None)
    return seconds, trials, requests


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--question", default="q005")
    ap.add_argument("--substitutes", type=int, default=101)
    ap.add_argument("--budget", type=int, default=256)
    ap.add_argument("--kv-cache-gib", type=int, default=2, help="vLLM's KV cache on the CPU, whole GiB (VLLM_CPU_KVCACHE_SPACE), both paths")
    ap.add_argument("--in-flight", type=int, default=128, help="the served path's requests in flight at most (its --batch-size)")
    args = ap.parse_args()
    os.environ["VLLM_CPU_KVCACHE_SPACE"] = str(args.kv_cache_gib)  # both engines: vLLM reads it in process too

    from sleight.backends import load_model
    from sleight.backends.resolve import resolve
    from sleight.tamper import engine
    from sleight.tamper.data import load_questions, load_substitutes

    qs = {q.id: q.question for q in load_questions()[0]}
    subs = load_substitutes(limit=args.substitutes)[0]
    cfg = engine.TamperConfig(max_new_tokens=args.budget)
    rows = []

    v = load_model(engine="vllm")
    rendered = engine.render_question(v, qs[args.question])
    version = v.info.engine_version
    s, ref, req = timed(v, rendered, subs, cfg)
    rows.append(("vLLM in process", s, ref, req))
    v.close()
    del v

    with tempfile.TemporaryDirectory() as tmp:
        proc, base = start_server(resolve("smollm2-135m-instruct").load_path, args.kv_cache_gib, Path(tmp) / "server.log")
        try:
            sm = load_model(f"openai:{base}#subject", batch_size=args.in_flight)
            assert sm.render_chat([{"role": "user", "content": qs[args.question]}]).ids == rendered.ids
            s, got, req = timed(sm, rendered, subs, cfg)
            rows.append((f"served, {args.in_flight} in flight", s, got, req))
            retries = sm.engine_stats()["retries"]
            sm.close()
        finally:
            proc.terminate()
            proc.wait(timeout=30)

    n = len(subs)
    print(f"\n{args.question} x {n} substitutes, budget {args.budget}; {version}, float32, KV cache {args.kv_cache_gib} GiB; served retries: {retries}")
    print(f"{'path':<24} {'seconds':>8} {'trials/s':>9} {'tok/s':>8} {'requests':>9} {'same':>8} {'full sweep':>11}")
    for name, s, trials, req in rows:
        toks = sum(len(t.reply.token_ids) for t in trials)
        same = sum(a.reply.token_ids == b.reply.token_ids for a, b in zip(ref, trials))
        print(f"{name:<24} {s:8.1f} {n / s:9.2f} {toks / s:8.1f} {req:>9} {same:>4}/{n:<3} {100 * 101 / (n / s) / 3600:9.2f} h")
    print(f"served throughput / in process: {rows[0][1] / rows[1][1]:.2f}")


if __name__ == "__main__":
    main()
