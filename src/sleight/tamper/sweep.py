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
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
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

    @property
    def label(self) -> str:
        return self.name if self.shard.whole else f"{self.name} [{self.shard}]"


@dataclass
class TaskResult:
    task: Task
    ok: bool
    lines: list[str] = field(default_factory=list)
    error: str | None = None


def plan_tasks(
    models: Sequence[str], shards: int, out: Path, name_of: Callable[[str], str], argv_of: Callable[[str, Shard, Path], list[str]]
) -> list[Task]:
    """One task per (model, shard), models in the given order (pure)."""
    if not models:
        raise UserError("--models names no model")
    if shards < 1:
        raise UserError(f"--shards must be at least 1 (got {shards})")
    names: dict[str, str] = {}
    for m in models:
        name = name_of(m)
        if name in names:
            raise UserError(f"--models {names[name]!r} and {m!r} would both write {out / name}; give each model once")
        names[name] = m
    return [
        Task(name, m, Shard(k, shards), out / name, tuple(argv_of(m, Shard(k, shards), out / name)))
        for name, m in names.items()
        for k in range(1, shards + 1)
    ]


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
    """The sweep's one progress display: a line rewritten in place on a terminal, a new line per
    change otherwise (a log, CI, a pipe)."""

    def __init__(
        self,
        runs: Mapping[str, tuple[Path, int, int]],
        *,
        stream: TextIO | None = None,
        enabled: bool = True,
        interactive: bool | None = None,
    ) -> None:
        self.runs = dict(runs)  # name -> (run dir, questions, substitutes)
        self.stream = stream if stream is not None else sys.stdout
        self.enabled = enabled
        self.interactive = bool(self.stream.isatty()) if interactive is None else interactive
        self.running = self.finished = self.failed = 0
        self.start = time.monotonic()
        self._last = ""
        self._lock = threading.Lock()

    def counts(self) -> dict[str, tuple[int, int]]:
        return {name: (committed_trials(d, q, s), q * s) for name, (d, q, s) in self.runs.items()}

    def refresh(self, *, force: bool = False) -> None:
        if not self.enabled:
            return
        with self._lock:
            line = progress_line(self.counts(), self.running, self.finished, self.failed, time.monotonic() - self.start)
            key = line.split("[", 1)[0] + line.split("]", 1)[-1]  # the clock alone is no change
            if not force and key == self._last:
                if self.interactive:
                    self.stream.write("\r" + line + "\033[K")
                    self.stream.flush()
                return
            self._last = key
            self.stream.write(("\r" + line + "\033[K") if self.interactive else line + "\n")
            self.stream.flush()

    def close(self) -> None:
        self.refresh(force=True)
        if self.enabled and self.interactive:
            self.stream.write("\n")
            self.stream.flush()


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
    gpus_auto: float = 1.0,
    cpus: int = 1,
    init_kwargs: Mapping[str, Any] | None = None,
    every_s: float = 1.0,
    argv_for: Callable[[Task, float], Sequence[str]] | None = None,
) -> tuple[list[TaskResult], float]:
    """The tasks on a Ray cluster (a local one, started and stopped here, when ``address`` is None).

    ``gpus`` None: ``gpus_auto`` GPUs per task where the cluster has GPUs, none otherwise. Returns the
    results and the GPUs each task asked for.
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
        per_task = gpus if gpus is not None else (gpus_auto if cluster_gpus(ray) > 0 else 0.0)
        remote = ray.remote(
            num_cpus=cpus, num_gpus=per_task, max_calls=1, max_retries=0, runtime_env={"env_vars": task_env(per_task, cpus)}
        )(task_fn)
        refs = {remote.remote(list(argv_for(t, per_task) if argv_for else t.argv)): t for t in tasks}
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
        return [results[t] for t in tasks], per_task
    finally:
        ray.shutdown()
