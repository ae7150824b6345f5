"""What a table of the paper needs, before anything loads: ``reproduce --list`` and ``--dry-run``.

Per checkpoint and run: the items (the paper's sample size, or ``--limit``), the forward passes (one
per prefilled context plus one per decoded token, at the run's token caps: an upper bound), the GPU
memory of the weights in float16 with a margin for the KV cache, and an estimate of GPU-hours. Pure
arithmetic on the config; no hub, no model. The throughput constants are this project's assumptions
(an H100/H200-class GPU), not the paper's: the estimate sizes a job, it measures nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sleight.readout.reproduce import kinds
from sleight.readout.reproduce.config import Checkpoint, RunSpec, TableConfig

BYTES_PER_PARAM = 2  # float16 / bfloat16 weights (Table 3's caption: float16 forward passes)
DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "auto": 2}  # auto: the paper's checkpoints ship 16-bit weights
MEMORY_MARGIN = 1.25  # KV cache, activations, the engine's own (assumed)
PREFILL_FLOPS = 0.35 * 989e12  # sustained dense float16 FLOP/s in prefill (assumed)
BANDWIDTH = 4.0e12  # bytes/s of weight reads in a decode step (assumed)
BATCH = 64  # rows decoded together (reproduce's default --batch-size)


@dataclass(frozen=True)
class RunPlan:
    checkpoint: str
    run: str
    items: int
    contexts: int  # prefilled contexts (each one forward pass)
    decode_steps: int  # decoded tokens (each one forward pass, batched)
    memory_gib: float | None
    gpu_hours: float | None

    @property
    def passes(self) -> int:
        return self.contexts + self.decode_steps


def per_item(spec: RunSpec) -> tuple[int, int]:
    """(prefilled contexts, decoded tokens) of one item of ``spec``, at its caps (the run kind's count)."""
    return kinds.kind(spec.command).per_item(spec.settings)


def memory_gib(ck: Checkpoint, dtype: str = "float16") -> float | None:
    """The weights in ``dtype`` with the margin; None where the checkpoint's size is unknown."""
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
            out.append(RunPlan(ck.name, name, n, n * c, n * d, memory_gib(ck, wd), gpu_hours(ck, spec.command, n * c, n * d)))
    return out


def status(config: TableConfig) -> str:
    if config.unreproducible:
        return f"cannot be reproduced here: {config.unreproducible}"
    if config.pending:
        return f"not runnable yet: {config.pending}"
    return "runnable"


def _gib(x: float | None) -> str:
    return "?" if x is None else f"{x:.0f} GiB"


def list_lines(config: TableConfig) -> list[str]:
    """``reproduce --list``: the item, its section, status, checkpoints (at their revisions) and needs."""
    rows = plan(config, config.checkpoints)
    wd = weights_dtype(config)
    mem = [r.memory_gib for r in rows if r.memory_gib is not None] or [ck for ck in (memory_gib(c, wd) for c in config.checkpoints) if ck is not None]
    items = ", ".join(f"{name} {spec.items or '?'}" for name, spec in config.runs.items()) or "—"
    per_ck = {ck.name: sum(r.passes for r in rows if r.checkpoint == ck.name) for ck in config.checkpoints}
    passes = max(per_ck.values()) if per_ck else 0
    cks = ", ".join(ck.model + (f"@{ck.revision}" if ck.revision else "") for ck in config.checkpoints)
    return [
        f"{config.name:<14} {config.title}",
        f"{'':<14} {config.section}; {status(config)}",
        f"{'':<14} checkpoints: {cks}",
        f"{'':<14} needs: GPU memory {_gib(max(mem) if mem else None)} (largest checkpoint, {wd}), items {items}, "
        f"forward passes ≤{passes:,} per checkpoint",
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
        out.append(f"  {r.checkpoint:<28} {r.run:<16} items {r.items:>5}  passes ≤{r.passes:>9,}  memory {_gib(r.memory_gib):>8}  GPU-hours ~{hours}")
    out.append(f"  total ~{total:.2f} GPU-hours (estimate: {BATCH} rows a batch, assumed throughput; see sleight.readout.reproduce.plan)")
    return out
