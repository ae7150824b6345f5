"""``sleight tamper sweep``: many models (and shards of each) scheduled on Ray, or one after another.

A sweep is a list of tasks, one per (model, shard), each an ordinary ``tamper run --shard K/N`` into
``OUT/<model>/``. Scheduling is Ray's (``ray.init(address=...)``, a local cluster when no address is
given): each task asks for ``num_gpus`` on a GPU cluster (the engine's tensor-parallel size) or for
CPUs otherwise, and runs in a fresh worker process (``max_calls=1``: a task's model and its memory go
with it). Without Ray the same tasks run one after another in this process. Nothing here merges
anything: every task writes its own questions' parts of its model's run directory, so the run
directories hold exactly what unsharded runs would, and a rerun skips what is committed.

Progress is read from the run directories themselves (committed parts), so one display covers
every task wherever it runs, resumed work included.

A sweep file (YAML, :func:`load_config`) says the whole study in one place: the subject models with
what each needs to load, the trials, the jury (judges on the vLLM or hf engine, or OpenAI-compatible
endpoints) and the report. :func:`execute` runs its subjects, then the jury over their runs, then the
report; :func:`plan_lines` describes it without loading anything: the tasks, each model's estimated
GPU memory, and the time the two-phase cost model gives (:class:`CostModel`).
"""

from __future__ import annotations

import json
import math
import os
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, TextIO

from sleight.errors import UserError
from sleight.rundir import Shard

TaskFn = Callable[[list[str]], list[str]]  # a task's argv -> its summary lines


@dataclass(frozen=True)
class Task:
    """One ``tamper run`` of a sweep: a model's shard, into that model's run directory."""

    name: str  # the model's folder under OUT (and its name in the progress display)
    model: str
    shard: Shard
    out: Path
    argv: tuple[str, ...]
    gpus: float = 1.0  # GPUs the task's engine spans (tensor x pipeline parallel), asked of a GPU cluster

    @property
    def label(self) -> str:
        return self.name if self.shard.whole else f"{self.name} [{self.shard}]"


@dataclass
class TaskResult:
    task: Task
    ok: bool
    lines: list[str] = field(default_factory=list)
    error: str | None = None


def parse_models(text: str) -> list[str]:
    """``--models A,B,...`` (blank entries dropped)."""
    return [m.strip() for m in text.split(",") if m.strip()]


# ------------------------------------------------------------------------------------------------
# progress, read from disk
# ------------------------------------------------------------------------------------------------


def committed_trials(run_dir: Path, n_questions: int, n_substitutes: int) -> int:
    """Trials committed in a run directory: one trials part per question (names only; parts
    appear whole, by rename)."""
    folder = Path(run_dir) / "trials.parquet"
    if not folder.is_dir():
        return 0
    done = set()
    for p in folder.glob("*.parquet"):
        head = p.name.split("-", 1)[0]
        if head.isdigit() and int(head) < n_questions:
            done.add(int(head))
    return len(done) * n_substitutes


def progress_line(counts: Mapping[str, tuple[int, int]], running: int, finished: int, failed: int, elapsed_s: float) -> str:
    """One line: trials done / total over the sweep and per model, and the tasks' states (pure)."""
    done = sum(d for d, _ in counts.values())
    total = sum(t for _, t in counts.values())
    pct = 100.0 * done / total if total else 100.0
    per = ", ".join(f"{name} {d}/{t}" for name, (d, t) in counts.items())
    m, s = divmod(int(elapsed_s), 60)
    return f"sweep: {done}/{total} trials ({pct:.0f}%) [{m}:{s:02d}]; {per}; tasks: {running} running, {finished} done, {failed} failed"


class Display:
    """The sweep's progress, through the one progress display (:class:`sleight.progress.SweepProgress`):
    on a terminal a bar of the sweep's trials with the per-model counts and task states beside it, off
    a terminal (a log, CI, a pipe) one line per change."""

    def __init__(
        self,
        runs: Mapping[str, tuple[Path, int, int]],
        *,
        stream: TextIO | None = None,
        enabled: bool = True,
        interactive: bool | None = None,
    ) -> None:
        from sleight.progress import SweepProgress

        self.runs = dict(runs)  # name -> (run dir, questions, substitutes)
        self.running = self.finished = self.failed = 0
        self.start = time.monotonic()
        total = sum(q * s for _, q, s in self.runs.values())
        out = stream if stream is not None else sys.stdout
        self._progress = SweepProgress(total, unit="trial", desc="sweep", enabled=enabled, stream=out, interactive=interactive, tokens=False)
        self._last = ""
        self._lock = threading.Lock()

    def counts(self) -> dict[str, tuple[int, int]]:
        return {name: (committed_trials(d, q, s), q * s) for name, (d, q, s) in self.runs.items()}

    def refresh(self, *, force: bool = False) -> None:
        if not self._progress.enabled:
            return
        with self._lock:
            counts = self.counts()
            line = progress_line(counts, self.running, self.finished, self.failed, time.monotonic() - self.start)
            key = line.split("[", 1)[0] + line.split("]", 1)[-1]  # the clock alone is no change
            self._progress.show(sum(d for d, _ in counts.values()), line, changed=force or key != self._last)
            self._last = key

    def close(self) -> None:
        self.refresh(force=True)
        self._progress.close()


class _Poller:
    """Refreshes the display every ``every_s`` seconds while tasks run."""

    def __init__(self, display: Display, every_s: float) -> None:
        self.display, self.every_s = display, every_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sweep-progress", daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            self.display.refresh()

    def __enter__(self) -> _Poller:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


# ------------------------------------------------------------------------------------------------
# execution
# ------------------------------------------------------------------------------------------------


def error_line(exc: BaseException) -> str:
    """A failed task's cause in one line (a user error as itself, a dead worker as such)."""
    cause = getattr(exc, "cause", None) or exc
    name = type(cause).__name__
    if isinstance(cause, UserError):
        return str(cause).splitlines()[0] if str(cause) else name
    if "WorkerCrashed" in name or "ActorDied" in name or "NodeDied" in name or "WorkerCrashed" in type(exc).__name__:
        return "its worker process died before it finished (killed, or out of memory); rerun the sweep to resume it"
    text = str(cause).strip().splitlines()
    return f"{name}: {text[-1] if text else ''}"[:300]


def run_in_process(tasks: Sequence[Task], task_fn: TaskFn, display: Display, *, every_s: float = 1.0) -> list[TaskResult]:
    """The tasks one after another in this process (no Ray)."""
    results = []
    with _Poller(display, every_s):
        for t in tasks:
            display.running = 1
            display.refresh(force=True)
            try:
                results.append(TaskResult(t, True, task_fn(list(t.argv))))
                display.finished += 1
            except (UserError, Exception) as exc:  # noqa: BLE001 - a task's failure is reported, the sweep goes on
                results.append(TaskResult(t, False, error=error_line(exc)))
                display.failed += 1
            display.running = 0
    display.close()
    return results


def import_ray(required: bool) -> Any | None:
    """The ``ray`` module; None when it is missing and not required (one line when it is)."""
    try:
        import ray
    except ImportError:
        if required:
            raise UserError(
                "--ray needs Ray, which is not installed: pip install 'sleight[ray]' (or drop --ray to run the tasks one after another)"
            ) from None
        return None
    return ray


def task_env(gpus: float, cpus: int, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a task's worker: OpenMP that does not spin (a torch job beside another
    collapses otherwise), one OpenMP pool of the task's CPUs on CPU, and the offline/cache settings
    of this process (pure)."""
    base = os.environ if base is None else base
    env = {"OMP_WAIT_POLICY": "PASSIVE", "TOKENIZERS_PARALLELISM": "false"}
    if not gpus:
        env["OMP_NUM_THREADS"] = str(max(1, cpus))
    for key in (
        "HF_HUB_OFFLINE",
        "HF_HOME",
        "HF_HUB_CACHE",
        "SLEIGHT_CACHE",
        "TRANSFORMERS_VERBOSITY",
        "HF_HUB_DISABLE_PROGRESS_BARS",
    ):
        if base.get(key):
            env[key] = base[key]
    return env


def cluster_gpus(ray: Any) -> float:
    return float(ray.cluster_resources().get("GPU", 0.0))


def run_on_ray(
    ray: Any,
    tasks: Sequence[Task],
    task_fn: TaskFn,
    display: Display,
    *,
    address: str | None,
    gpus: float | None,
    cpus: int = 1,
    init_kwargs: Mapping[str, Any] | None = None,
    every_s: float = 1.0,
) -> tuple[list[TaskResult], list[float]]:
    """The tasks on a Ray cluster (a local one, started and stopped here, when ``address`` is None).

    ``gpus`` None: each task asks for its own ``Task.gpus`` where the cluster has GPUs, none
    otherwise; a CPU task runs torch with ``cpus`` threads unless its command line sets them.
    Returns the results and the GPUs each task asked for.
    """
    import logging

    kwargs: dict[str, Any] = {
        "include_dashboard": False,
        "log_to_driver": False,
        "logging_level": logging.WARNING,
        **dict(init_kwargs or {}),
    }
    if address:
        kwargs["address"] = address
    ray.init(**kwargs)
    try:
        has_gpus = cluster_gpus(ray) > 0
        remote = ray.remote(num_cpus=cpus, num_gpus=0, max_calls=1, max_retries=0)(task_fn)
        refs, asked = {}, []
        for t in tasks:
            g = gpus if gpus is not None else (t.gpus if has_gpus else 0.0)
            argv = list(t.argv) if g or "--threads" in t.argv else [*t.argv, "--threads", str(cpus)]
            ref = remote.options(num_gpus=g, runtime_env={"env_vars": task_env(g, cpus)}).remote(argv)
            refs[ref] = t
            asked.append(g)
        pending = list(refs)
        results: dict[Task, TaskResult] = {}
        display.running = len(pending)
        display.refresh(force=True)
        while pending:
            ready, pending = ray.wait(pending, num_returns=1, timeout=every_s)
            for ref in ready:
                t = refs[ref]
                try:
                    results[t] = TaskResult(t, True, list(ray.get(ref)))
                    display.finished += 1
                except Exception as exc:  # noqa: BLE001 - a task's failure is reported, the sweep goes on
                    results[t] = TaskResult(t, False, error=error_line(exc))
                    display.failed += 1
            display.running = len(pending)
            display.refresh()
        display.close()
        return [results[t] for t in tasks], asked
    finally:
        ray.shutdown()


# ------------------------------------------------------------------------------------------------
# the sweep file
# ------------------------------------------------------------------------------------------------

SWEEPS_DATA = "data/sweeps"  # shipped sweep files, named by --config NAME
# What every subject's ``tamper run`` takes from the file's ``run:`` section.
RUN_KEYS: tuple[str, ...] = (
    "questions", "substitutes", "questions_file", "substitutes_file", "trigger", "max_new_tokens", "decoding",
    "batch_size", "device", "threads",
)  # fmt: skip
# What a model needs to load (a subject's or a local judge's); named as the ``tamper run`` options.
LOAD_KEYS: tuple[str, ...] = (
    "engine", "revision", "quantization", "dtype", "max_model_len", "gpu_memory_utilization",
    "tensor_parallel_size", "pipeline_parallel_size", "engine_args",
)  # fmt: skip
VLLM_ONLY: tuple[str, ...] = ("max_model_len", "gpu_memory_utilization", "tensor_parallel_size", "pipeline_parallel_size", "engine_args", "quantization")
ESTIMATE_KEYS: tuple[str, ...] = ("params_b", "active_params_b", "bytes_per_param")
PATH_KEYS: tuple[str, ...] = ("questions_file", "substitutes_file")
ENGINES: tuple[str, ...] = ("hf", "vllm")
# The options of a task that the sweep sets itself, never the file.
TASK_OWN: frozenset[str] = frozenset({"command", "tamper_command", "func", "model", "shard", "out", "overwrite", "no_progress"})


@dataclass(frozen=True)
class Model:
    """A model to load: a subject of the sweep, or a local judge. ``load`` holds only what the file sets."""

    name: str
    model: str  # hub id or path (for an endpoint judge: the served model's name)
    load: Mapping[str, Any] = field(default_factory=dict)
    params_b: float | None = None  # billions of parameters, for the estimates only
    active_params_b: float | None = None  # read per token (a mixture of experts reads fewer)
    bytes_per_param: float | None = None  # overrides what quantization and dtype imply
    shards: int | None = None
    endpoint: str | None = None  # judges only: an OpenAI-compatible base URL
    lineage: str | None = None  # judges only

    @property
    def engine(self) -> str:
        return "openai" if self.endpoint else str(self.load.get("engine") or "hf")

    @property
    def spec(self) -> str:
        """The spec the jury names this judge by (a subject's is its model)."""
        return f"openai:{self.endpoint}#{self.model}" if self.endpoint else self.model


@dataclass(frozen=True)
class Jury:
    judges: tuple[Model, ...]
    prompt: str = "default"
    prompt_file: Path | None = None
    vote: str = "auto"
    max_new_tokens: int = 256
    batch_size: int = 16
    concurrency: int = 8
    api_key_env: str = "OPENAI_API_KEY"
    device: str = "auto"


@dataclass(frozen=True)
class Gpu:
    """The GPU the estimates are for (the cost model's reference: one H100 SXM)."""

    name: str = "H100 SXM"
    memory_gib: float = 80.0
    bandwidth_gbs: float = 3350.0


@dataclass(frozen=True)
class SweepConfig:
    source: str  # the file (or "--models")
    out: Path | None
    subjects: tuple[Model, ...]
    run: Mapping[str, Any] = field(default_factory=dict)
    shards: int = 1
    jury: Jury | None = None
    report_out: Path | None = None
    report_site: bool = True
    gpu: Gpu = field(default_factory=Gpu)


def _where(source: str, at: str) -> str:
    return f"sweep file {source}: {at}" if at else f"sweep file {source}"


def _mapping(value: Any, source: str, at: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise UserError(f"{_where(source, at)} must be a mapping")
    return {str(k): v for k, v in value.items()}


def _keys(data: Mapping[str, Any], allowed: Sequence[str], source: str, at: str) -> None:
    unknown = sorted(set(data) - set(allowed))
    if unknown:
        raise UserError(f"{_where(source, at)}: unknown key(s) {', '.join(unknown)} (allowed: {', '.join(allowed)})")


def _typed(value: Any, kind: type | tuple[type, ...], source: str, at: str, what: str) -> Any:
    if value is None:
        return None
    if isinstance(value, bool) and kind is not bool or not isinstance(value, kind):
        raise UserError(f"{_where(source, at)}: {what} must be {getattr(kind, '__name__', 'a number')} (got {value!r})")
    return value


_NUMBER = (int, float)
_LOAD_TYPES: dict[str, Any] = {
    "engine": str, "revision": str, "quantization": str, "dtype": str, "max_model_len": int,
    "gpu_memory_utilization": _NUMBER, "tensor_parallel_size": int, "pipeline_parallel_size": int, "engine_args": dict,
}  # fmt: skip
_RUN_TYPES: dict[str, Any] = {
    "questions": int, "substitutes": int, "questions_file": str, "substitutes_file": str, "trigger": str,
    "max_new_tokens": int, "decoding": str, "batch_size": int, "device": str, "threads": int,
}  # fmt: skip


def _model(entry: Any, source: str, at: str, *, judge: bool, shared: Mapping[str, Any] | None = None) -> Model:
    """One subject or judge; ``shared``: the load settings every subject takes from ``run:``."""
    data = _mapping(entry, source, at)
    allowed = ["name", "model", *LOAD_KEYS, *ESTIMATE_KEYS] + (["endpoint", "lineage"] if judge else ["shards"])
    _keys(data, allowed, source, at)
    model = _typed(data.get("model"), str, source, at, "model")
    if not model:
        raise UserError(f"{_where(source, at)}: no model (a hub id or a path{', or the served name of an endpoint' if judge else ''})")
    load = {k: _typed(data[k], _LOAD_TYPES[k], source, at, k) for k in LOAD_KEYS if data.get(k) is not None}
    endpoint = _typed(data.get("endpoint"), str, source, at, "endpoint")
    if endpoint and load:
        raise UserError(f"{_where(source, at)}: an endpoint judge is loaded by its server; drop {', '.join(sorted(load))}")
    merged = {**dict(shared or {}), **load}
    engine = merged.get("engine", "hf")
    if engine not in ENGINES:
        raise UserError(f"{_where(source, at)}: unknown engine '{engine}' (choose from {', '.join(ENGINES)})")
    if engine == "hf":
        vllm_only = sorted(k for k in merged if k in VLLM_ONLY)
        if vllm_only:
            raise UserError(f"{_where(source, at)}: {', '.join(vllm_only)} are vllm settings; set engine: vllm")
    if model.startswith((".", "~")):
        model = str(Path(model).expanduser())
    est = {k: _typed(data.get(k), _NUMBER, source, at, k) for k in ESTIMATE_KEYS}
    for k, v in est.items():
        if v is not None and v <= 0:
            raise UserError(f"{_where(source, at)}: {k} must be positive (got {v})")
    shards = _typed(data.get("shards"), int, source, at, "shards")
    if shards is not None and shards < 1:
        raise UserError(f"{_where(source, at)}: shards must be at least 1 (got {shards})")
    name = _typed(data.get("name"), str, source, at, "name")
    if not name or not name.strip() or "/" in name or name in (".", ".."):
        raise UserError(f"{_where(source, at)}: give a name (its run folder under out, and its name in the tables)")
    return Model(name, model, load, est["params_b"], est["active_params_b"], est["bytes_per_param"], shards, endpoint,
                 _typed(data.get("lineage"), str, source, at, "lineage"))  # fmt: skip


def parse_config(data: Any, source: str, run_options: Mapping[str, Any] | None = None) -> SweepConfig:
    """A sweep file's content checked (pure): every mistake is one line naming where it is.

    ``run_options``: every option ``tamper run`` takes (its parsed empty command line); its ``run:``
    section may set any of them (the command checks their values when it parses the tasks)."""
    top = _mapping(data, source, "")
    _keys(top, ["out", "shards", "gpu", "run", "subjects", "jury", "report"], source, "")
    run = _mapping(top.get("run"), source, "run")
    extra = [k for k in (run_options or {}) if k not in TASK_OWN and k not in RUN_KEYS and k not in LOAD_KEYS]
    _keys(run, [*RUN_KEYS, *LOAD_KEYS, *extra], source, "run")
    types = {**_RUN_TYPES, **_LOAD_TYPES}
    run = {k: _typed(v, types[k], source, "run", k) if k in types else v for k, v in run.items() if v is not None}
    shared = {k: v for k, v in run.items() if k in LOAD_KEYS}
    subjects_raw = top.get("subjects")
    if not isinstance(subjects_raw, list) or not subjects_raw:
        raise UserError(f"{_where(source, 'subjects')}: give a list of subject models")
    subjects = tuple(_model(e, source, f"subjects[{i + 1}]", judge=False, shared=shared) for i, e in enumerate(subjects_raw))
    seen: dict[str, str] = {}
    for m in subjects:
        if m.name in seen:
            raise UserError(f"{_where(source, 'subjects')}: '{seen[m.name]}' and '{m.model}' are both named {m.name}; give each its own name")
        seen[m.name] = m.model
    shards = _typed(top.get("shards", 1), int, source, "", "shards")
    if shards < 1:
        raise UserError(f"{_where(source, '')}: shards must be at least 1 (got {shards})")
    gpu_raw = _mapping(top.get("gpu"), source, "gpu")
    _keys(gpu_raw, ["name", "memory_gib", "bandwidth_gbs"], source, "gpu")
    gpu = Gpu(**{k: _typed(v, str if k == "name" else _NUMBER, source, "gpu", k) for k, v in gpu_raw.items()})
    jury = _jury(top.get("jury"), source) if top.get("jury") is not None else None
    report = _mapping(top.get("report"), source, "report")
    _keys(report, ["out", "site"], source, "report")
    out = _typed(top.get("out"), str, source, "", "out")
    report_out = _typed(report.get("out"), str, source, "report", "out")
    return SweepConfig(
        source, Path(out) if out else None, subjects, run, shards, jury, Path(report_out) if report_out else None,
        bool(_typed(report.get("site", True), bool, source, "report", "site")), gpu,
    )  # fmt: skip


def _jury(value: Any, source: str) -> Jury:
    data = _mapping(value, source, "jury")
    allowed = ["judges", "prompt", "prompt_file", "vote", "max_new_tokens", "batch_size", "concurrency", "api_key_env", "device"]
    _keys(data, allowed, source, "jury")
    raw = data.get("judges")
    if not isinstance(raw, list) or not raw:
        raise UserError(f"{_where(source, 'jury.judges')}: give a list of judges")
    judges = tuple(_model(e, source, f"jury.judges[{i + 1}]", judge=True) for i, e in enumerate(raw))
    specs = [j.spec for j in judges]
    for spec in specs:
        if specs.count(spec) > 1:
            raise UserError(f"{_where(source, 'jury.judges')}: judge '{spec}' appears twice; each juror must be a different model")
    lineages = [j.lineage.strip().lower() for j in judges if j.lineage]
    for lin in lineages:
        if lineages.count(lin) > 1:
            raise UserError(f"{_where(source, 'jury.judges')}: two judges of lineage '{lin}'; a jury's judges come from distinct lineages")
    kw: dict[str, Any] = {}
    for key, kind in (("prompt", str), ("vote", str), ("max_new_tokens", int), ("batch_size", int), ("concurrency", int), ("api_key_env", str), ("device", str)):
        if data.get(key) is not None:
            kw[key] = _typed(data[key], kind, source, "jury", key)
    if data.get("prompt_file") is not None:
        if data.get("prompt") is not None:
            raise UserError(f"{_where(source, 'jury')}: give prompt or prompt_file, not both")
        kw["prompt_file"] = Path(_typed(data["prompt_file"], str, source, "jury", "prompt_file")).expanduser()
    return Jury(judges, **kw)


def config_path(spec: str | Path) -> tuple[Path | None, str]:
    """The sweep file ``--config`` names: a file, or the name of a shipped one (``study``)."""
    p = Path(spec)
    if p.is_file():
        return p, p.read_text(encoding="utf-8")
    shipped = resources.files("sleight").joinpath(SWEEPS_DATA, f"{spec}.yaml")
    if p.suffix == "" and os.sep not in str(spec) and shipped.is_file():
        return None, shipped.read_text(encoding="utf-8")
    names = sorted(f.name.removesuffix(".yaml") for f in resources.files("sleight").joinpath(SWEEPS_DATA).iterdir() if f.name.endswith(".yaml"))
    raise UserError(f"--config {spec}: no such file, nor a shipped sweep file (shipped: {', '.join(names) or 'none'})")


def load_config(spec: str | Path, run_options: Mapping[str, Any] | None = None) -> SweepConfig:
    """Read and check a sweep file (or a shipped one by name); ``run_options`` as for :func:`parse_config`."""
    import yaml

    path, text = config_path(spec)
    source = str(path) if path is not None else f"{spec} (shipped)"
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise UserError(f"sweep file {source} is not YAML: {str(exc).splitlines()[0]}") from None
    return parse_config(data, source, run_options)


def models_config(models: Sequence[str], shards: int, name_of: Callable[[str], str]) -> SweepConfig:
    """The sweep ``--models A,B,...`` gives: those subjects, every option from the command line."""
    if not models:
        raise UserError("--models names no model")
    if shards < 1:
        raise UserError(f"--shards must be at least 1 (got {shards})")
    names: dict[str, str] = {}
    for m in models:
        name = name_of(m)
        if name in names:
            raise UserError(f"--models {names[name]!r} and {m!r} would both write a folder named {name}; give each model once")
        names[name] = m
    return SweepConfig("--models", None, tuple(Model(name, m) for name, m in names.items()), shards=shards)


# ------------------------------------------------------------------------------------------------
# the plan
# ------------------------------------------------------------------------------------------------


@dataclass
class Plan:
    """A sweep's tasks, and what follows them (the jury, the report)."""

    config: SweepConfig
    out: Path
    tasks: list[Task]
    options: dict[str, dict[str, Any]]  # per subject: the tamper run options its tasks pass on
    unsupported: dict[str, list[str]]  # per model (subject or judge): settings no engine here takes yet

    @property
    def run_dirs(self) -> list[Path]:
        return [self.out / m.name for m in self.config.subjects]


def option_argv(options: Mapping[str, Any], defaults: Mapping[str, Any]) -> tuple[list[str], list[str]]:
    """``tamper run`` flags for the options that differ from its defaults (pure), and the options it
    has no flag for. A flag is its option's name with ``-`` for ``_``, as every flag of the command is
    spelled; a mapping is passed as JSON."""
    argv: list[str] = []
    missing: list[str] = []
    for key, value in options.items():
        if key not in defaults:
            missing.append(key)
            continue
        if value is None or value == defaults[key]:
            continue
        flag = "--" + key.replace("_", "-")
        if value is True and defaults[key] is False:
            argv.append(flag)
        else:
            argv += [flag, json.dumps(value) if isinstance(value, Mapping) else str(value)]
    return argv, missing


def cli_options(args: Mapping[str, Any], defaults: Mapping[str, Any]) -> dict[str, Any]:
    """The ``tamper run`` options a sweep's command line sets (those that differ from the defaults)."""
    return {k: args[k] for k in defaults if k not in TASK_OWN and k in args and args[k] != defaults[k]}


def build_plan(
    config: SweepConfig,
    out: Path | None,
    run_defaults: Mapping[str, Any],
    overrides: Mapping[str, Any] | None = None,
    *,
    shards: int | None = None,
) -> Plan:
    """One task per (subject, shard), each a ``tamper run`` command line (pure).

    A subject's options are the file's ``run:`` section, then its own load settings, then the command
    line's ``overrides``. ``run_defaults`` are ``tamper run``'s own defaults (its parsed empty command
    line), which say both which options it takes and which need no flag. ``shards`` (the command
    line's) replaces every subject's count."""
    if shards is not None and shards < 1:
        raise UserError(f"--shards must be at least 1 (got {shards})")
    out = Path(out or config.out or "runs/tamper-sweep")
    tasks: list[Task] = []
    options: dict[str, dict[str, Any]] = {}
    unsupported: dict[str, list[str]] = {}
    for m in config.subjects:
        opts = {**config.run, **m.load, **dict(overrides or {})}
        options[m.name] = opts
        n = shards or m.shards or config.shards
        flags, missing = option_argv(opts, run_defaults)
        if missing:
            unsupported[m.name] = missing
        gpus = float(int(opts.get("tensor_parallel_size") or 1) * int(opts.get("pipeline_parallel_size") or 1))
        for k in range(1, n + 1):
            shard = Shard(k, n)
            argv = ["tamper", "run", "--model", m.model, "--shard", str(shard), "--out", str(out / m.name), "--no-progress", *flags]
            tasks.append(Task(m.name, m.model, shard, out / m.name, tuple(argv), gpus))
    if config.jury is not None:
        for j in config.jury.judges:
            missing = [k for k in ("revision", "quantization", "engine_args") if k in j.load]
            if missing:
                unsupported[f"judge {j.name}"] = missing
    return Plan(config, out, tasks, options, unsupported)


# ------------------------------------------------------------------------------------------------
# the estimate: GPU memory per model, and time from the two-phase cost model
# ------------------------------------------------------------------------------------------------

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


def bytes_per_param(m: Model, options: Mapping[str, Any]) -> tuple[float, float]:
    """(engine, hf twin) bytes per parameter: the quantization's, else the dtype's (pure)."""
    if m.bytes_per_param:
        return m.bytes_per_param, m.bytes_per_param
    quant = str(options.get("quantization") or "").lower()
    engine = options.get("engine") or "hf"
    dtype = str(options.get("dtype") or ("bfloat16" if engine == "vllm" else "float32"))
    plain = DTYPE_BYTES.get(dtype, 2.0)
    if quant in FOUR_BIT:
        engine_bytes = 0.55  # 4-bit weights, plus scales and the layers left at 16 bits
    elif quant.startswith("fp8"):
        engine_bytes = 1.05
    else:
        engine_bytes = plain
    twin = plain if any(quant.startswith(q) for q in QUANTIZED_ON_LOAD) else engine_bytes
    return engine_bytes, twin


def estimate(m: Model, options: Mapping[str, Any], n_questions: int, n_substitutes: int, shards: int, gpu: Gpu, cost: CostModel = CostModel()) -> Estimate:
    """Memory and time of one subject (pure); ``None`` where the file gives no ``params_b``."""
    if not m.params_b:
        return Estimate(None, None, None, None, None, None, None, "give params_b for an estimate")
    engine = options.get("engine") or "hf"
    tp = int(options.get("tensor_parallel_size") or 1) * int(options.get("pipeline_parallel_size") or 1)
    eb, tb = bytes_per_param(m, options)
    weights = m.params_b * 1e9 * eb / GIB
    twin = m.params_b * 1e9 * tb / GIB if engine == "vllm" else 0.0
    per_gpu = weights / tp + twin
    share = float(options.get("gpu_memory_utilization") or 0.5) if engine == "vllm" else 1.0
    fits = None
    if engine == "vllm":
        fits = weights / tp < share * gpu.memory_gib and twin < (1 - share) * gpu.memory_gib
    if engine != "vllm":
        note = "the cost model is vLLM's on a GPU; see docs/results.md for the hf engine's measured speed"
        return Estimate(weights, twin, per_gpu, fits, None, None, None, note)
    active = (m.active_params_b or m.params_b) * 1e9
    slow = (active * eb / 1e9) / cost.ref_weights_gb * cost.ref_bandwidth_gbs / gpu.bandwidth_gbs / tp
    slow_twin = (active * tb / 1e9) / cost.ref_weights_gb * cost.ref_bandwidth_gbs / gpu.bandwidth_gbs
    budget = int(options.get("max_new_tokens") or cost.budget)
    f = budget / cost.budget
    phase_a = f * (cost.longest_trial_tokens * cost.step_s * slow + cost.rounds * cost.round_s)
    clean = min(cost.clean_tokens, budget) * cost.step_s * slow
    phase_b = n_substitutes * cost.reply_tokens * f / cost.twin_tokens_per_s * slow_twin
    question = phase_a + clean + phase_b
    per_task = math.ceil(n_questions / shards) * question + cost.load_s
    return Estimate(weights, twin, per_gpu, fits, question, per_task, shards * per_task * tp / 3600.0)


def _counts(options: Mapping[str, Any]) -> tuple[int, int]:
    """Questions and substitutes a subject's options give (the shipped files unless it names its own)."""
    from sleight.tamper.data import load_questions, load_substitutes

    qs, _ = load_questions(options.get("questions_file"), options.get("questions"))
    subs, _ = load_substitutes(options.get("substitutes_file"), options.get("substitutes"))
    return len(qs), len(subs)


def _gib(x: float | None) -> str:
    return "—" if x is None else f"{x:.1f}"


def _dur(s: float | None) -> str:
    if s is None:
        return "—"
    m = int(round(s / 60))
    return f"{m // 60}h{m % 60:02d}" if m >= 60 else f"{max(m, 1)} min" if s >= 30 else f"{s:.0f} s"


def _load_text(m: Model, options: Mapping[str, Any]) -> str:
    parts = [str(options.get("engine") or "hf")]
    for key in ("quantization", "dtype"):
        if options.get(key):
            parts.append(str(options[key]))
    if options.get("max_model_len"):
        parts.append(f"len {options['max_model_len']}")
    tp, pp = int(options.get("tensor_parallel_size") or 1), int(options.get("pipeline_parallel_size") or 1)
    if tp * pp > 1:
        parts.append(f"tp {tp}" + (f" pp {pp}" if pp > 1 else ""))
    if options.get("revision"):
        parts.append(f"@{str(options['revision'])[:10]}")
    if options.get("engine_args"):
        parts.append("+" + ",".join(sorted(options["engine_args"])))
    return " ".join(parts)


def plan_lines(plan: Plan, cost: CostModel = CostModel()) -> list[str]:
    """The dry run: tasks, estimated GPU memory and time per model, the jury and the report. Loads
    no model (reads only the question and substitute files, and which parts are committed)."""
    cfg, gpu = plan.config, plan.config.gpu
    lines = [f"sweep plan from {cfg.source}: {len(cfg.subjects)} model(s), {len(plan.tasks)} task(s), runs in {plan.out}"]
    lines.append(
        f"estimates for one {gpu.name} ({gpu.memory_gib:g} GiB, {gpu.bandwidth_gbs:g} GB/s) from the two-phase cost model "
        f"(docs/engines.md); memory is the weights (vLLM's copy + the hf twin's), not the KV cache"
    )
    header = ["model", "hub id or path", "load", "trials", "tasks", "weights GiB", "twin GiB", "per GPU GiB", "fits", "per task", "GPU-h", "committed"]
    rows: list[list[str]] = []
    total_h, longest, total_trials, total_committed = 0.0, 0.0, 0, 0
    missing_estimate = []
    for m in cfg.subjects:
        opts = plan.options[m.name]
        q, s = _counts(opts)
        shards = sum(t.name == m.name for t in plan.tasks)
        est = estimate(m, opts, q, s, shards, gpu, cost)
        done = committed_trials(plan.out / m.name, q, s)
        total_trials += q * s
        total_committed += done
        if est.gpu_hours is not None:
            total_h += est.gpu_hours
            longest = max(longest, est.task_s or 0.0)
        else:
            missing_estimate.append(m.name)
        fits = "—" if est.fits is None else ("yes" if est.fits else "NO")
        rows.append([m.name, m.model, _load_text(m, opts), f"{q}x{s}", str(shards), _gib(est.weights_gib), _gib(est.twin_gib),
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
    by_key: dict[str, list[str]] = {}
    for name, keys in plan.unsupported.items():
        for key in keys:
            by_key.setdefault(key, []).append(name)
    for key, names in by_key.items():
        shown = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
        lines.append(f"not runnable on this install yet: {key} ({shown}): no engine here takes it; a dry run only")
    if any(r[8] == "NO" for r in rows):
        lines.append("fits NO: vLLM's share of the GPU (gpu_memory_utilization, default 0.5) cannot hold its weights, or the rest cannot hold the hf twin's")
    lines += _jury_lines(plan)
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
        prompt += " (not there yet: put your copy of the study's judge prompt there; docs/jury.md)"
    size = "a jury of one" if len(jury.judges) == 1 else f"{len(jury.judges)} judges"
    lines = [f"jury: {size}, {prompt}, vote {jury.vote}, up to {jury.max_new_tokens} tokens per vote, after every subject has run"]
    for j in jury.judges:
        where = f"endpoint {j.endpoint}" if j.endpoint else _load_text(j, j.load)
        mem = ""
        if j.params_b and not j.endpoint:
            eb, _ = bytes_per_param(j, {"engine": j.engine, **j.load})
            mem = f", weights about {j.params_b * 1e9 * eb / GIB:.1f} GiB"
        lines.append(f"  {j.name}: {j.model} ({where}{mem})" + (f", lineage {j.lineage}" if j.lineage else ""))
    return lines


# ------------------------------------------------------------------------------------------------
# the whole sweep: subjects, then the jury, then the report
# ------------------------------------------------------------------------------------------------


@dataclass
class Scheduling:
    """How the tasks run: the ``tamper run`` of one task and its checks (from the CLI), and where."""

    task_fn: TaskFn  # a task's argv -> its summary lines (runs the model)
    prepare_fn: Callable[[list[str]], Any]  # a task's argv -> its checked inputs (.left, .questions, .substitutes, .nothing_to_do())
    ray: str | None = None
    no_ray: bool = False
    gpus_per_task: float | None = None
    cpus_per_task: int = 1
    progress: bool = True


def execute(plan: Plan, how: Scheduling, echo: Callable[[str], None] = print) -> int:
    """Run the plan's tasks (skipping what is committed), then its jury, then its report; ``echo``
    gets each line to show. A failed task stops the sweep before the jury, in one line."""
    if how.no_ray and how.ray:
        raise UserError("give --ray ADDRESS or --no-ray, not both")
    if how.cpus_per_task < 1:
        raise UserError(f"--cpus-per-task must be at least 1 (got {how.cpus_per_task})")
    if how.gpus_per_task is not None and how.gpus_per_task < 0:
        raise UserError(f"--gpus-per-task must be 0 or more (got {how.gpus_per_task})")
    if plan.unsupported:
        name, keys = next(iter(plan.unsupported.items()))
        raise UserError(
            f"{plan.config.source}: {name} sets {', '.join(keys)}, which no engine of this install takes yet "
            f"({len(plan.unsupported)} model(s) in all; --dry-run shows the plan)"
        )
    prompt_file = None
    if plan.config.jury is not None:
        from sleight.tamper.jury.prompt import builtin_prompt
        from sleight.tamper.jury.prompt_file import load_prompt_file

        jury = plan.config.jury
        prompt_file = load_prompt_file(jury.prompt_file) if jury.prompt_file else None
        if prompt_file is None:
            builtin_prompt(jury.prompt)  # a wrong prompt name answers before any model runs

    # Every task checked first (inputs, a different config refused, committed parts verified), so a
    # mistake answers in one line before a cluster starts; finished shards are not scheduled.
    todo, runs, skipped = [], {}, 0
    for t in plan.tasks:
        prep = how.prepare_fn(list(t.argv))
        runs[t.name] = (t.out, len(prep.questions), len(prep.substitutes))
        if prep.left:
            todo.append(t)
        else:
            prep.nothing_to_do()
            skipped += 1
    display = Display(runs, enabled=how.progress)
    if skipped:
        echo(f"sweep: {skipped} of {len(plan.tasks)} task(s) already committed in {plan.out}; {len(todo)} to run")
    if not todo:
        display.close()
        if plan.config.jury is None and plan.config.report_out is None:
            echo(
                f"sweep: nothing to do; judge with 'sleight tamper judge --run {plan.out} --jury ...', report with 'sleight tamper report {plan.out}'"
            )
    else:
        _run_tasks(plan, todo, how, display, echo)
    if plan.config.jury is not None:
        _judge(plan, prompt_file, how, echo)
    if plan.config.report_out is not None:
        from sleight.tamper.report.report import write_report

        paths = write_report(plan.run_dirs, plan.config.report_out, site=plan.config.report_site, progress=how.progress)
        echo(f"report: {paths.markdown}" + (f", site {paths.index}" if paths.index else ""))
    return 0


def _run_tasks(plan: Plan, todo: list[Task], how: Scheduling, display: Display, echo: Callable[[str], None]) -> None:
    ray = None if how.no_ray else import_ray(required=how.ray is not None)
    if ray is None:
        if not how.no_ray:
            echo(
                f"sweep: Ray is not installed, so the {len(todo)} task(s) run one after another here (pip install 'sleight[ray]' to schedule them on a cluster)"
            )
        results = run_in_process(todo, how.task_fn, display)
        where = "in this process"
    else:
        results, asked = run_on_ray(ray, todo, how.task_fn, display, address=how.ray, gpus=how.gpus_per_task, cpus=how.cpus_per_task)
        lo, hi = min(asked), max(asked)
        gpus = f"{lo:g}" if lo == hi else f"{lo:g}-{hi:g}"
        where = f"on Ray ({how.ray or 'local cluster'}; {gpus} GPU(s), {how.cpus_per_task} CPU(s) per task)"
    failed = [r for r in results if not r.ok]
    for r in results:
        for line in r.lines:
            echo(f"  {r.task.label}: {line}")
    for r in failed:
        echo(f"  {r.task.label}: FAILED: {r.error}")
    echo(f"sweep: {len(results) - len(failed)} of {len(results)} task(s) finished {where}; runs in {plan.out}")
    if failed:
        raise UserError(
            f"{len(failed)} of {len(results)} sweep task(s) failed (listed above); run the same command again to resume them"
        )


def judge_loader(jury: Jury, batch_size: int) -> Callable[[str], Any]:
    """``spec -> judge`` for a file's jury: an endpoint's checked client, or a local model loaded with
    its own engine and settings."""
    by_spec = {j.spec: j for j in jury.judges}

    def load(spec: str) -> Any:
        from sleight.backends import load_model
        from sleight.backends.chat import LocalChat, load_chat

        j = by_spec[spec]
        if j.endpoint:
            return load_chat(spec, concurrency=jury.concurrency, api_key_env=jury.api_key_env)
        kw = {k: v for k, v in j.load.items() if k in ("max_model_len", "gpu_memory_utilization", "tensor_parallel_size", "pipeline_parallel_size")}
        device = None if jury.device == "auto" else jury.device
        return LocalChat(load_model(j.model, engine=j.engine, device=device, dtype=j.load.get("dtype"), batch_size=max(batch_size, 1), **kw))

    return load


def _judge(plan: Plan, prompt_file: Any, how: Scheduling, echo: Callable[[str], None]) -> None:
    from sleight.tamper.jury.run import judge_runs, no_vote_line, summary_lines

    jury = plan.config.jury
    assert jury is not None
    summary = judge_runs(
        plan.run_dirs,
        [j.spec for j in jury.judges],
        variant=jury.prompt,
        prompt_file=prompt_file.path if prompt_file is not None else None,
        vote=jury.vote,
        max_tokens=jury.max_new_tokens,
        batch=jury.batch_size,
        loader=judge_loader(jury, jury.batch_size),
        progress=how.progress,
    )
    for line in summary_lines(summary):
        echo(line)
    if summary.asked and not summary.cast:
        raise UserError(no_vote_line(summary))
