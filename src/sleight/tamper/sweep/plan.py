"""A sweep's tasks: one typed :class:`~sleight.tamper.job.TamperJob` per (subject, shard), each
into that subject's run directory (pure)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from sleight.backends.spec import ModelSpec
from sleight.backends.vllm_registry import VllmRegistry, installed_registry, refusal
from sleight.errors import UserError
from sleight.rundir import Shard
from sleight.tamper.job import TRIAL_KEYS, TamperJob
from sleight.tamper.sweep.config import SweepConfig

SPEC_KEYS: tuple[str, ...] = tuple(f.name for f in fields(ModelSpec) if f.name != "model")


@dataclass(frozen=True)
class Task:
    """One ``tamper run`` of a sweep: a subject's shard, as the job its worker runs."""

    name: str  # the subject's folder under OUT (and its name in the progress display)
    job: TamperJob

    @property
    def shard(self) -> Shard:
        from sleight.rundir import parse_shard

        return parse_shard(self.job.shard)

    @property
    def out(self) -> Path:
        return self.job.run_dir

    @property
    def gpus(self) -> float:
        """GPUs the task's engine spans (tensor x pipeline parallel), asked of a GPU cluster; none
        for a served subject (its server holds the GPUs; the task only sends requests)."""
        return 0.0 if self.job.model.engine == "openai" else float(self.job.model.devices)

    @property
    def label(self) -> str:
        return self.name if self.shard.whole else f"{self.name} [{self.shard}]"


@dataclass
class Plan:
    """A sweep's tasks, and what follows them (the jury, the report)."""

    config: SweepConfig
    out: Path
    tasks: list[Task]

    @property
    def run_dirs(self) -> list[Path]:
        return [self.out / m.name for m in self.config.subjects]

    def spec_of(self, name: str) -> ModelSpec:
        return next(t.job.model for t in self.tasks if t.name == name)


def build_plan(config: SweepConfig, out: Path | None, overrides: Mapping[str, Any] | None = None, *, shards: int | None = None) -> Plan:
    """One task per (subject, shard) (pure).

    A subject's settings are the file's ``run:`` section, then its own, then the command line's
    ``overrides`` (trial settings and model settings by their field names; only those the command
    line set). ``shards`` (the command line's) replaces every subject's count."""
    if shards is not None and shards < 1:
        raise UserError(f"--shards must be at least 1 (got {shards})")
    over = dict(overrides or {})
    unknown = sorted(set(over) - set(TRIAL_KEYS) - set(SPEC_KEYS))
    if unknown:
        raise ValueError(f"build_plan: no setting named {', '.join(unknown)}")
    trials = replace(config.trials, **{k: v for k, v in over.items() if k in TRIAL_KEYS})
    spec_over = {k: v for k, v in over.items() if k in SPEC_KEYS}
    out = Path(out or config.out or "runs/tamper-sweep")
    tasks: list[Task] = []
    for m in config.subjects:
        try:
            spec = m.spec.with_(**spec_over) if spec_over else m.spec
        except UserError as exc:
            raise UserError(f"{m.name}: {exc}") from None
        n = shards or m.shards or config.shards
        for k in range(1, n + 1):
            job = TamperJob(spec, trials, out=out / m.name, shard=str(Shard(k, n)), progress=False)
            tasks.append(Task(m.name, job))
    return Plan(config, out, tasks)


def loaded_models(plan: Plan) -> list[tuple[str, ModelSpec]]:
    """Every model the plan loads in a process of its own, by the name the plan gives it: each
    subject as its tasks run it, then each local judge (a served judge loads nothing here)."""
    subjects = {t.name: t.job.model for t in plan.tasks}
    jury = plan.config.jury
    judges = [(f"judge {j.name}", j.spec) for j in (jury.judges if jury else ()) if not j.endpoint]
    return [*subjects.items(), *judges]


def vllm_lines(plan: Plan, read_registry: Callable[[], VllmRegistry | None] = installed_registry) -> list[str]:
    """The dry run's word on vLLM's names: whether the installed vLLM (``read_registry``, called only
    when the plan has a vLLM model; None where none is installed) knows every quantization, load
    format and engine argument the plan's vLLM models name; the sweep refuses the ones it does not
    before any model loads."""
    models = [(n, s) for n, s in loaded_models(plan) if s.engine == "vllm"]
    if not models:
        return []
    registry = read_registry()
    if registry is None:
        return [f"vLLM: not installed here; the names of {len(models)} vLLM model(s) are checked where they load"]
    bad = [line for n, s in models if (line := refusal(n, s, registry))]
    if not bad:
        return [f"vLLM: the installed {registry.label} knows every quantization, load format and engine argument above"]
    return [
        f"vLLM: {len(bad)} of {len(models)} vLLM model(s) name what the installed {registry.label} does not know; "
        "the sweep refuses them before any model loads:",
        *(f"  {line}" for line in bad),
    ]
