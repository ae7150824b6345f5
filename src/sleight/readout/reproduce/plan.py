"""What a table of the paper needs, before anything loads: ``reproduce --list`` and ``--dry-run``.

Per checkpoint and run: the items (the paper's sample size, or ``--limit``), the forward passes (one
per prefilled context plus one per decoded token, at the run's token caps: an upper bound), the GPU
memory in the dtype the run loads in, and an estimate of GPU-hours. Memory, where the checkpoint's
architecture is known (:func:`sleight.backends.architectures.architecture`: the shipped table by hub
id, or a folder's config.json), is three terms from :mod:`sleight.backends.memory`: the weights
counted by tensor, the KV cache of one batch (``BATCH`` rows of the run's context plus what a context
decodes), and the activations of that batch's prefill (its ``BATCH`` x context tokens, and the
logits of ``BATCH`` rows, as vLLM's profiling run counts a batch); otherwise the parameters in that
dtype with a 25% margin. Pure arithmetic on the config and the shipped table; no hub, no model. The
throughput constants are this project's assumptions (an H100/H200-class GPU), not the paper's: the
estimate sizes a job, it measures nothing.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from sleight.backends import memory as mem
from sleight.backends.architectures import architecture
from sleight.readout.reproduce import kinds
from sleight.readout.reproduce.config import Checkpoint, RunSpec, TableConfig

BYTES_PER_PARAM = 2  # float16 / bfloat16 weights (Table 3's caption: float16 forward passes)
DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "auto": 2}  # auto: the paper's checkpoints ship 16-bit weights
MEMORY_MARGIN = 1.25  # KV cache, activations, the engine's own (assumed), where no architecture is known
PREFILL_FLOPS = 0.35 * 989e12  # sustained dense float16 FLOP/s in prefill (assumed)
BANDWIDTH = 4.0e12  # bytes/s of weight reads in a decode step (assumed)
BATCH = 64  # rows decoded together (reproduce's default --batch-size)
DEFAULT_CONTEXT = 300  # a prompt's typical length where no run names its kind (kinds/base.py RunKind.context_tokens)


@dataclass(frozen=True)
class RunPlan:
    checkpoint: str
    run: str
    items: int
    contexts: int  # prefilled contexts (each one forward pass)
    decode_steps: int  # decoded tokens (each one forward pass, batched)
    memory_gib: float | None
    gpu_hours: float | None
    terms: mem.Memory | None = None  # weights, KV cache and activations (None: no architecture known)

    @property
    def passes(self) -> int:
        return self.contexts + self.decode_steps


def per_item(spec: RunSpec) -> tuple[int, int]:
    """(prefilled contexts, decoded tokens) of one item of ``spec``, at its caps (the run kind's count)."""
    return kinds.kind(spec.command).per_item(spec.settings)


def row_tokens(spec: RunSpec | None) -> tuple[int, int]:
    """(prefilled tokens, tokens a row holds) of one row of ``spec``'s batch: its kind's typical
    context, plus the tokens one context decodes at the run's caps (an upper bound)."""
    if spec is None:
        return DEFAULT_CONTEXT, DEFAULT_CONTEXT
    context = kinds.kind(spec.command).context_tokens
    contexts, decoded = per_item(spec)
    return context, context + math.ceil(decoded / max(contexts, 1))


def memory(ck: Checkpoint, dtype: str = "float16", spec: RunSpec | None = None) -> mem.Memory | None:
    """Weights, KV cache and activations of ``ck`` in ``dtype`` for one batch of ``spec``'s rows
    (module docstring); None where the checkpoint's architecture is unknown."""
    arch = architecture(ck.model)
    if arch is None:
        return None
    prefill, held = row_tokens(spec)
    batch = mem.Profile(batched_tokens=BATCH * prefill, seqs=BATCH, block_size=1, in_flight=1)  # the hf engine's cache holds exactly its tokens
    return mem.memory(arch.config, None, dtype, held, batch, sequences=BATCH, extra_params=arch.encoder_params())


def memory_gib(ck: Checkpoint, dtype: str = "float16", spec: RunSpec | None = None) -> float | None:
    """GPU memory of ``ck`` in ``dtype`` for ``spec``: :func:`memory`'s three terms together, else the
    parameters with the margin; None where neither the architecture nor the size is known."""
    terms = memory(ck, dtype, spec)
    if terms is not None:
        return terms.total_gib
    return None if ck.params_b is None else ck.params_b * 1e9 * DTYPE_BYTES[dtype] * MEMORY_MARGIN / 2**30


def weights_dtype(config: TableConfig, given: str | None = None, engine: str = "hf") -> str:
    """The dtype a run loads in: the command's ``--dtype``, else the table's, else the engine's default."""
    from sleight.backends import default_dtype

    return given or config.dtype or default_dtype(engine)


def gpu_hours(ck: Checkpoint, command: str, contexts: int, steps: int) -> float | None:
    if ck.params_b is None:
        return None
    flops = 2 * ck.params_b * 1e9 * kinds.kind(command).context_tokens * contexts
    decode = steps * ck.params_b * 1e9 * BYTES_PER_PARAM / BANDWIDTH / BATCH
    return (flops / PREFILL_FLOPS + decode) / 3600


def plan(config: TableConfig, checkpoints: Sequence[Checkpoint], limit: int | None = None, dtype: str | None = None) -> list[RunPlan]:
    """One :class:`RunPlan` per (checkpoint, run) of ``config`` (``limit`` caps the items; memory in
    the dtype the run loads in, :func:`weights_dtype`)."""
    wd = weights_dtype(config, dtype)
    out = []
    for ck in checkpoints:
        for name, spec in config.runs.items():
            n = spec.items or 0
            if limit is not None:
                n = min(n, limit) if n else limit
            c, d = per_item(spec)
            if kinds.kind(spec.command).tokenizer_only:  # App. C.6: the tokenizer alone, no weights on a GPU
                out.append(RunPlan(ck.name, name, n, 0, 0, 0.0, 0.0))
                continue
            out.append(RunPlan(ck.name, name, n, n * c, n * d, memory_gib(ck, wd, spec), gpu_hours(ck, spec.command, n * c, n * d), memory(ck, wd, spec)))
    return out


def status(config: TableConfig) -> str:
    if config.unreproducible:
        return f"cannot be reproduced here: {config.unreproducible}"
    if config.pending:
        return f"not runnable yet: {config.pending}"
    return "runnable"


def _gib(x: float | None) -> str:
    return "?" if x is None else f"{x:.0f} GiB"


def _terms(m: mem.Memory | None) -> str:
    """The three terms of a memory estimate, or the margin's note where there are none."""
    if m is None:
        return "parameters x dtype, +25%"
    return f"weights {m.weights_gib:.1f} + KV {m.kv_gib:.1f} + activations {m.activation_gib:.1f}"


def list_lines(config: TableConfig) -> list[str]:
    """``reproduce --list``: the item, its section, status, checkpoints (at their revisions) and needs."""
    rows = plan(config, config.checkpoints)
    wd = weights_dtype(config)
    sized = [(r.memory_gib, r.terms) for r in rows if r.memory_gib is not None]
    if all(kinds.kind(spec.command).tokenizer_only for spec in config.runs.values()):
        sized = [(0.0, None)]
    elif not sized:
        sized = [(g, memory(c, wd)) for c in config.checkpoints if (g := memory_gib(c, wd)) is not None]
    largest = max(sized, key=lambda x: x[0]) if sized else None
    items = ", ".join(f"{name} {spec.items or '?'}" for name, spec in config.runs.items()) or "—"
    per_ck = {ck.name: sum(r.passes for r in rows if r.checkpoint == ck.name) for ck in config.checkpoints}
    passes = max(per_ck.values()) if per_ck else 0
    cks = ", ".join(ck.model + (f"@{ck.revision}" if ck.revision else "") for ck in config.checkpoints)
    return [
        f"{config.name:<14} {config.title}",
        f"{'':<14} {config.section}; {status(config)}",
        f"{'':<14} checkpoints: {cks}",
        f"{'':<14} needs: GPU memory {_gib(largest[0] if largest else None)} (largest checkpoint, {wd}"
        + (f": {_terms(largest[1])}" if largest and largest[0] else ": tokenizer only" if largest else "")
        + f"), items {items}, forward passes ≤{passes:,} per checkpoint",
    ]


def dry_run_lines(config: TableConfig, checkpoints: Sequence[Checkpoint], limit: int | None = None, dtype: str | None = None) -> list[str]:
    """``reproduce --dry-run``: per checkpoint and run, items, passes, memory (in the dtype the run
    loads in), GPU-hours; the total."""
    out = [f"{config.name}: {config.title} ({status(config)}); weights in {weights_dtype(config, dtype)}"]
    if not config.runnable:
        return out
    rows = plan(config, checkpoints, limit, dtype)
    total = 0.0
    for r in rows:
        hours = "?" if r.gpu_hours is None else f"{r.gpu_hours:.2f}"
        total += r.gpu_hours or 0.0
        terms = " (tokenizer only)" if r.memory_gib == 0 else f" ({_terms(r.terms)})" if r.memory_gib is not None else ""
        out.append(f"  {r.checkpoint:<28} {r.run:<16} items {r.items:>5}  passes ≤{r.passes:>9,}  memory {_gib(r.memory_gib):>8}{terms}  GPU-hours ~{hours}")
    out.append(
        f"  total ~{total:.2f} GPU-hours (estimate: {BATCH} rows a batch, assumed throughput; memory: weights by tensor, the batch's KV cache "
        "and its prefill's activations; see sleight.readout.reproduce.plan)"
    )
    return out
