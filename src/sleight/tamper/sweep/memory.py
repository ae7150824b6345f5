"""The dry run's numbers: each model's GPU memory against vLLM's share of the GPU (its weights counted
tensor by tensor, the KV cache of one request at ``max_model_len`` and the activations of vLLM's
profiling run, :mod:`sleight.backends.memory`; and an hf twin's weights where one scores) and time
from the two-phase cost model, and the plan as lines. Pure but for reading the question files, the
shipped architectures (or a local checkpoint's config.json) and which parts are committed."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

from sleight.backends import memory as mem
from sleight.backends.architectures import architecture
from sleight.backends.spec import GPU_MEMORY_UTILIZATION, ModelSpec
from sleight.tamper.job import TrialSettings
from sleight.tamper.sweep.config import Gpu, Model
from sleight.tamper.sweep.execute import committed_trials
from sleight.tamper.sweep.plan import Plan, vllm_lines

FOUR_BIT = ("awq", "awq_marlin", "gptq", "gptq_marlin", "bitsandbytes", "mxfp4", "compressed-tensors")
QUANTIZED_ON_LOAD = ("bitsandbytes", "fp8")  # the checkpoint holds 16-bit weights; vLLM quantizes them
DTYPE_BYTES = {"float32": 4.0, "bfloat16": 2.0, "float16": 2.0, "auto": 2.0, "half": 2.0}
GIB = 1024**3


@dataclass(frozen=True)
class CostModel:
    """The two-phase cost model of docs/engines.md ("The cost model"), as numbers.

    Counted by the driver on the bundled model (budget 256, q001-q005 x 24 substitutes): the longest
    trial of a question decodes 261 tokens over up to 26 rounds, the clean run up to 61 tokens, a
    trial's reply scores 123.6 tokens in Phase B. Assumed, not measured here, for a 7B bfloat16 model
    (14 GB of weights read per decode step) on one H100: a 101-row decode step of 20 ms, 30 ms of
    scheduling and prefill per round, the hf twin scoring 20,000 tokens/s, about 2 minutes to load
    both engines. Another model or GPU scales the step and the twin's rate by the bytes read per token
    over the GPU's memory bandwidth (decoding is bound by it); tensor parallelism divides them.
    """

    budget: int = 256
    longest_trial_tokens: float = 261.0
    rounds: float = 26.0
    clean_tokens: float = 61.0
    reply_tokens: float = 123.6
    ref_weights_gb: float = 14.0
    ref_bandwidth_gbs: float = 3350.0
    step_s: float = 0.020
    round_s: float = 0.030
    twin_tokens_per_s: float = 20000.0
    load_s: float = 120.0


@dataclass(frozen=True)
class Estimate:
    weights_gib: float | None  # the engine's copy of the weights, all its GPUs together
    twin_gib: float | None  # the hf twin's copy (vLLM only): one GPU
    per_gpu_gib: float | None  # on the busiest GPU: the engine's share, plus the twin on the first
    fits: bool | None  # within the GPU's memory (and vLLM's share of it), where that is known
    question_s: float | None  # one question: its clean run and its trial batch, both phases
    task_s: float | None  # one shard: its questions plus one load
    gpu_hours: float | None  # the model's tasks together
    note: str = ""
    kv_gib: float | None = None  # vLLM's KV cache for one request at max_model_len, all GPUs (None: no architecture known)
    activation_gib: float | None = None  # the transient peak of vLLM's profiling run, on each GPU

    @property
    def engine_gib(self) -> float | None:
        """The engine's weights, KV cache and activations together (what its share must hold)."""
        if self.weights_gib is None:
            return None
        return self.weights_gib + (self.kv_gib or 0.0) + (self.activation_gib or 0.0)


def bytes_per_param(m: Model, spec: ModelSpec) -> tuple[float, float]:
    """(engine, hf twin) bytes per parameter: the quantization's, else the dtype's (pure)."""
    if m.bytes_per_param:
        return m.bytes_per_param, m.bytes_per_param
    quant = str(spec.quantization or "").lower()
    plain = DTYPE_BYTES.get(_dtype(spec), 2.0)
    if quant in FOUR_BIT:
        engine_bytes = 0.55  # 4-bit weights, plus scales and the layers left at 16 bits
    elif quant.startswith("fp8"):
        engine_bytes = 1.05
    else:
        engine_bytes = plain
    twin = plain if _quantized_on_load(spec) else engine_bytes
    return engine_bytes, twin


def _quantized_on_load(spec: ModelSpec) -> bool:
    """Does vLLM quantize the checkpoint's 16-bit weights as it loads them (an hf twin then reads
    them in 16 bits)?"""
    quant = str(spec.quantization or "").lower()
    return any(quant.startswith(q) for q in QUANTIZED_ON_LOAD)


def memory_share(spec: ModelSpec) -> float:
    """vLLM's share of the GPU: the spec's, else the engine's default for its scorer (pure)."""
    if spec.gpu_memory_utilization is not None:
        return spec.gpu_memory_utilization
    return GPU_MEMORY_UTILIZATION[spec.scorer]


def _dtype(spec: ModelSpec) -> str:
    """The weights' dtype a spec loads in: its own, else the engine's default on a GPU."""
    return str(spec.dtype or ("auto" if spec.engine == "vllm" else "float32"))


def _memory(spec: ModelSpec, gpu: Gpu) -> tuple[mem.Memory, float | None] | None:
    """(the engine's memory, the hf twin's weights or None) from the model's architecture; None
    where none is known (neither a folder with a config.json nor a shipped entry)."""
    arch = architecture(spec.model)
    if arch is None:
        return None
    dtype = _dtype(spec)
    config = arch.config
    extra = arch.encoder_params(spec.limit_mm_per_prompt)
    limit = spec.max_model_len or mem.context_length(config)  # vLLM's default: the model's own
    profile = mem.vllm_profile(gpu.name, gpu.memory_gib, spec.engine_args)
    engine = mem.memory(config, spec.quantization, dtype, limit, profile, extra_params=extra)
    twin = None
    if spec.engine == "vllm" and spec.scorer == "twin":
        twin = mem.weights_bytes(config, None if _quantized_on_load(spec) else spec.quantization, dtype, extra) / GIB
    return engine, twin


def estimate(m: Model, spec: ModelSpec, budget: int, n_questions: int, n_substitutes: int, shards: int, gpu: Gpu, cost: CostModel = CostModel()) -> Estimate:
    """Memory and time of one subject (pure but for reading its architecture); ``None`` where the
    file gives no ``params_b`` and no architecture is known.

    Memory: with the model's architecture known (:func:`sleight.backends.architectures.architecture`),
    its weights by tensor, the KV cache of one request at ``max_model_len`` (vLLM refuses to start
    without it) and the activations of vLLM's profiling run at its defaults for this GPU
    (:mod:`sleight.backends.memory`); a vllm subject fits when weights and KV (over its
    tensor-parallel GPUs) and the activations (on each) take no more than vLLM's share of the GPU.
    Without one, the weights from ``params_b`` x bytes per parameter only, against the share. Under
    ``scorer: twin`` the hf twin's weights must fit in what vLLM leaves. Time: the two-phase cost
    model, bytes per parameter x active parameters."""
    if spec.engine == "openai":
        return Estimate(None, None, None, None, None, None, None, "served elsewhere: nothing loads here")
    known = _memory(spec, gpu)
    if not m.params_b and known is None:
        return Estimate(None, None, None, None, None, None, None, "give params_b for an estimate")
    engine = spec.engine
    tp = spec.devices
    eb, tb = bytes_per_param(m, spec)
    share = memory_share(spec) if engine == "vllm" else 1.0
    kv = act = None
    if known is not None:
        memory, twin = known
        weights, kv, act = memory.weights_gib, memory.kv_gib, memory.activation_gib
        per_gpu = (weights + kv) / tp + act + (twin or 0.0)
        needed = (weights + kv) / tp + act
    else:
        params = m.params_b or 0.0
        weights = params * 1e9 * eb / GIB
        twin = params * 1e9 * tb / GIB if engine == "vllm" and spec.scorer == "twin" else None
        per_gpu = weights / tp + (twin or 0.0)
        needed = weights / tp
    fits = None
    if engine == "vllm":
        fits = needed < share * gpu.memory_gib and (twin or 0.0) < (1 - share) * gpu.memory_gib
    if engine != "vllm":
        note = "the cost model is vLLM's on a GPU; see docs/results.md for the hf engine's measured speed"
        return Estimate(weights, twin, weights / tp + (twin or 0.0), fits, None, None, None, note)
    if not m.params_b:
        return Estimate(weights, twin, per_gpu, fits, None, None, None, "give params_b for a time estimate", kv, act)
    active = (m.active_params_b or m.params_b) * 1e9
    slow = (active * eb / 1e9) / cost.ref_weights_gb * cost.ref_bandwidth_gbs / gpu.bandwidth_gbs / tp
    slow_twin = (active * tb / 1e9) / cost.ref_weights_gb * cost.ref_bandwidth_gbs / gpu.bandwidth_gbs
    f = budget / cost.budget
    phase_a = f * (cost.longest_trial_tokens * cost.step_s * slow + cost.rounds * cost.round_s)
    clean = min(cost.clean_tokens, budget) * cost.step_s * slow
    # Phase B: the twin's scoring pass, or vLLM's own prefill of each reply (at least as fast).
    phase_b = n_substitutes * cost.reply_tokens * f / cost.twin_tokens_per_s * (slow_twin if twin else slow)
    question = phase_a + clean + phase_b
    per_task = math.ceil(n_questions / shards) * question + cost.load_s
    return Estimate(weights, twin, per_gpu, fits, question, per_task, shards * per_task * tp / 3600.0, "", kv, act)


def _counts(trials: TrialSettings) -> tuple[int, int]:
    """Questions and substitutes the trial settings give (the shipped files unless they name their own)."""
    from sleight.tamper.data import load_questions, load_substitutes

    qs, _ = load_questions(trials.questions_file, trials.questions)
    subs, _ = load_substitutes(trials.substitutes_file, trials.substitutes)
    return len(qs), len(subs)


def _gib(x: float | None) -> str:
    return "—" if x is None else f"{x:.1f}"


def _dur(s: float | None) -> str:
    if s is None:
        return "—"
    m = int(round(s / 60))
    return f"{m // 60}h{m % 60:02d}" if m >= 60 else f"{max(m, 1)} min" if s >= 30 else f"{s:.0f} s"


def load_text(spec: ModelSpec) -> str:
    """A spec's load settings in a few words (the plan's ``load`` column)."""
    parts = [spec.engine]
    for value in (spec.quantization, spec.dtype):
        if value:
            parts.append(value)
    if spec.load_format and spec.load_format != spec.quantization:
        parts.append(f"load {spec.load_format}")
    if spec.max_model_len:
        parts.append(f"len {spec.max_model_len}")
    if spec.engine == "vllm":
        parts.append(f"mem {memory_share(spec):g}")
    if spec.enforce_eager:
        parts.append("eager")
    if spec.devices > 1:
        parts.append(f"tp {spec.tensor_parallel_size}" + (f" pp {spec.pipeline_parallel_size}" if spec.pipeline_parallel_size > 1 else ""))
    if spec.revision:
        parts.append(f"@{spec.revision[:10]}")
    if spec.limit_mm_per_prompt is not None:
        parts.append("mm " + ",".join(f"{k}={v}" for k, v in sorted(spec.limit_mm_per_prompt.items())))
    if spec.chat_template_kwargs:
        parts.append(",".join(f"{k}={json.dumps(v)}" for k, v in sorted(spec.chat_template_kwargs.items())))
    if spec.scorer == "twin":
        parts.append("twin")
    if spec.engine_args:
        parts.append("+" + ",".join(sorted(spec.engine_args)))
    return " ".join(parts)


def plan_lines(plan: Plan, cost: CostModel = CostModel()) -> list[str]:
    """The dry run: tasks, estimated GPU memory and time per model, the jury and the report. Loads
    no model (reads only the question and substitute files, and which parts are committed)."""
    cfg, gpu = plan.config, plan.config.gpu
    lines = [f"sweep plan from {cfg.source}: {len(cfg.subjects)} model(s), {len(plan.tasks)} task(s), runs in {plan.out}"]
    profile = mem.vllm_profile(gpu.name, gpu.memory_gib)
    lines.append(
        f"estimates for one {gpu.name} ({gpu.memory_gib:g} GiB, {gpu.bandwidth_gbs:g} GB/s) from the two-phase cost model "
        f"(docs/engines.md); memory (sleight.backends.memory): the weights counted by tensor, KV for one request at max_model_len, "
        f"and the activations of vLLM's profiling run ({profile.batched_tokens} tokens, {profile.seqs} rows: its defaults for this GPU), "
        f"plus an hf twin's weights under scorer twin; vLLM's KV cache takes the rest of its share"
    )
    header = ["model", "hub id or path", "load", "trials", "tasks", "weights GiB", "KV GiB", "act GiB", "twin GiB", "per GPU GiB", "fits", "per task", "GPU-h",
              "committed"]  # fmt: skip
    rows: list[list[str]] = []
    total_h, longest, total_trials, total_committed = 0.0, 0.0, 0, 0
    missing_estimate, too_big, served = [], [], []
    trials = plan.tasks[0].job.trials if plan.tasks else cfg.trials
    q, s = _counts(trials)
    for m in cfg.subjects:
        spec = plan.spec_of(m.name)
        shards = sum(t.name == m.name for t in plan.tasks)
        est = estimate(m, spec, trials.max_new_tokens, q, s, shards, gpu, cost)
        done = committed_trials(plan.out / m.name, q, s)
        total_trials += q * s
        total_committed += done
        if est.gpu_hours is not None:
            total_h += est.gpu_hours
            longest = max(longest, est.task_s or 0.0)
        elif spec.engine == "openai":
            served.append(m.name)
        else:
            missing_estimate.append(m.name)
        if est.fits is False:
            what = "of weights" if est.kv_gib is None else "of weights, KV and activations"
            too_big.append(f"{m.name} ({_gib(est.engine_gib)} GiB {what} over {memory_share(spec):g} x {gpu.memory_gib:g} GiB)")
        fits = "—" if est.fits is None else ("yes" if est.fits else "NO")
        rows.append([m.name, m.model, load_text(spec), f"{q}x{s}", str(shards), _gib(est.weights_gib), _gib(est.kv_gib), _gib(est.activation_gib),
                     "none" if est.twin_gib is None and est.weights_gib is not None else _gib(est.twin_gib),
                     _gib(est.per_gpu_gib), fits, _dur(est.task_s), "—" if est.gpu_hours is None else f"{est.gpu_hours:.1f}", f"{done}/{q * s}"])  # fmt: skip
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    for r in [header, *rows]:
        lines.append("  " + "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
    lines.append(f"trials: {total_trials:,} in all, {total_committed:,} already committed")
    if total_h:
        lines.append(
            f"time: about {total_h:.1f} GPU-hours of subjects; with every task at once, about {_dur(longest)} (the longest task)"
            + (f"; no estimate for {', '.join(missing_estimate)} (no params_b)" if missing_estimate else "")
        )
    elif missing_estimate:
        lines.append("time: no estimate (" + (", ".join(missing_estimate[:3]) + (" ..." if len(missing_estimate) > 3 else "")) + ": no params_b, or not on vllm)")
    if served:
        lines.append(f"served: {', '.join(served)} send requests to their servers (a task asks for no GPU; the servers' speed decides the time)")
    known = [r for r in rows if r[header.index("fits")] != "—"]
    if too_big:
        lines.append(f"fits NO: {'; '.join(too_big)}: vLLM's share of the GPU cannot hold them (or the rest cannot hold the hf twin)")
    elif known:
        lines.append(f"fits: all {len(known)} model(s) with an estimate fit one {gpu.name} ({gpu.memory_gib:g} GiB), one at a time")
    lines += _jury_lines(plan)
    lines += vllm_lines(plan)
    report = cfg.report_out
    lines.append(f"report: {report}" + ("" if cfg.report_site else " (tables and plots, no site)") if report else "report: none (no report: section)")
    lines.append("dry run: nothing loaded, nothing written")
    return lines


def _jury_lines(plan: Plan) -> list[str]:
    jury = plan.config.jury
    if jury is None:
        return ["jury: none (no jury: section); judge later with 'sleight tamper judge --run OUT --jury ...'"]
    prompt = f"prompt file {jury.prompt_file}" if jury.prompt_file else f"prompt {jury.prompt}"
    if jury.prompt_file and not jury.prompt_file.is_file():
        prompt += " (not there yet: fetch the study's judge prompt; docs/jury.md)"
    size = "a jury of one" if len(jury.judges) == 1 else f"{len(jury.judges)} judges"
    lines = [f"jury: {size}, {prompt}, vote {jury.vote}, up to {jury.max_new_tokens} tokens per vote, after every subject has run"]
    for j in jury.judges:
        where = f"endpoint {j.endpoint}" if j.endpoint else load_text(j.spec)
        size = ""
        if not j.endpoint:
            est = estimate(j, j.spec, 1, 1, 1, 1, plan.config.gpu)
            fit = "" if est.fits is None else (", fits" if est.fits else ", does NOT fit")
            if est.kv_gib is not None:
                size = f", memory about {_gib(est.engine_gib)} GiB (weights {_gib(est.weights_gib)}, KV {_gib(est.kv_gib)}, activations {_gib(est.activation_gib)}){fit}"
            elif est.weights_gib is not None:
                size = f", weights about {_gib(est.weights_gib)} GiB{fit}"
        lines.append(f"  {j.name}: {j.model} ({where}{size})" + (f", lineage {j.lineage}" if j.lineage else ""))
    return lines
