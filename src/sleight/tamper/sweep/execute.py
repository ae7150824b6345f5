"""Running a sweep's tasks: one after another in this process, or on a Ray cluster (``ray.init(address=...)``,
a local cluster when no address is given), each task a fresh worker (``max_calls=1``: a task's model
and its memory go with it) that receives the task's typed job, never a command line. Nothing here
merges anything: every task writes its own questions' parts of its model's run directory, and a
rerun skips what is committed. Progress is read from the run directories themselves, so one display
covers every task wherever it runs. :func:`execute` runs the subjects, then the jury, then the report.
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

from sleight import OPENMP_ENV
from sleight.backends.vllm_registry import check_specs
from sleight.errors import UserError
from sleight.tamper import job
from sleight.tamper.job import TamperJob
from sleight.tamper.sweep.plan import Plan, Task, loaded_models

TaskFn = Callable[[TamperJob], list[str]]  # a task's job -> its summary lines


@dataclass
class TaskResult:
    task: Task
    ok: bool
    lines: list[str] = field(default_factory=list)
    error: str | None = None


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
                results.append(TaskResult(t, True, task_fn(t.job)))
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
    """The environment of a task's worker: OpenMP that spins only briefly (a torch job beside another
    collapses otherwise; ``sleight.OPENMP_ENV``), one OpenMP pool of the task's CPUs on CPU, and the
    offline/cache settings of this process (pure)."""
    base = os.environ if base is None else base
    env = {**OPENMP_ENV, "TOKENIZERS_PARALLELISM": "false"}
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


def local_cluster_env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """What ``ray.init`` adds to the environment of a cluster it starts (the raylet's, hence its
    workers'): task workers at this command's own priority, ``RAY_worker_niceness`` 0 (an increment
    on the raylet's niceness, which is this process's). Ray's default nices every worker by 15, so
    a sweep's tasks, its whole work, yield to anything else on the machine: beside a 2-thread torch
    job on 2 cores they got a sixth of the CPU and the job the rest (``benchmarks/ray_sweep.py``).
    A niceness of the user's own stays theirs; a running cluster (``--ray ADDRESS``, ``RAY_ADDRESS``,
    ``ray start``) keeps its own settings, this environment reaching none of its processes (pure)."""
    base = os.environ if base is None else base
    return {} if "RAY_worker_niceness" in base else {"RAY_worker_niceness": "0"}


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
    otherwise; a CPU task runs torch with ``cpus`` threads unless its spec sets them.
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
    added = local_cluster_env()
    os.environ.update(added)  # read by the processes a local cluster starts, and only there
    try:
        ray.init(**kwargs)
    finally:
        for key in added:
            os.environ.pop(key, None)
    try:
        has_gpus = cluster_gpus(ray) > 0
        remote = ray.remote(num_cpus=cpus, num_gpus=0, max_calls=1, max_retries=0)(task_fn)
        refs: dict[Any, int] = {}
        asked = []
        for i, t in enumerate(tasks):
            g = gpus if gpus is not None else (t.gpus if has_gpus else 0.0)
            job = t.job if g or t.job.model.threads else t.job.with_(model=t.job.model.with_(threads=cpus))
            ref = remote.options(num_gpus=g, runtime_env={"env_vars": task_env(g, cpus)}).remote(job)
            refs[ref] = i
            asked.append(g)
        pending = list(refs)
        results: dict[int, TaskResult] = {}
        display.running = len(pending)
        display.refresh(force=True)
        while pending:
            ready, pending = ray.wait(pending, num_returns=1, timeout=every_s)
            for ref in ready:
                i = refs[ref]
                try:
                    results[i] = TaskResult(tasks[i], True, list(ray.get(ref)))
                    display.finished += 1
                except Exception as exc:  # noqa: BLE001 - a task's failure is reported, the sweep goes on
                    results[i] = TaskResult(tasks[i], False, error=error_line(exc))
                    display.failed += 1
            display.running = len(pending)
            display.refresh()
        display.close()
        return [results[i] for i in range(len(tasks))], asked
    finally:
        ray.shutdown()




@dataclass
class Scheduling:
    """How the tasks run: where, and the function a worker runs on a task's job."""

    ray: str | None = None
    no_ray: bool = False
    gpus_per_task: float | None = None
    cpus_per_task: int = 1
    progress: bool = True
    from sleight.tamper import runner

    task_fn: TaskFn = runner.execute  # a job -> its summary lines (runs the model; a Ray worker imports it)
    prepare_fn: Callable[[TamperJob], Any] = job.prepare  # a job -> its checked inputs, before any model loads


def jury_prompt_file(plan: Plan) -> Any:
    """The jury's prompt file, checked as the judge will check it, before any model runs: loaded, and
    under the study's conventions the study's pinned judge module or refused in one line
    (:func:`~sleight.tamper.jury.prompt_file.checked_for`, the judge's own check); ``None`` for a
    shipped prompt, whose name is checked here too."""
    jury = plan.config.jury
    if jury is None:
        return None
    if not jury.prompt_file:
        from sleight.tamper.jury.prompt import builtin_prompt

        builtin_prompt(jury.prompt)  # a wrong prompt name answers before any model runs
        return None
    from sleight.tamper.jury.prompt_file import checked_for, load_prompt_file

    # the conventions the jury will judge under: the subjects' runs' (as sweep.judging passes them)
    return checked_for(load_prompt_file(jury.prompt_file), plan.tasks[0].job.trials.conventions if plan.tasks else None)


def execute(plan: Plan, how: Scheduling, echo: Callable[[str], None] = print) -> int:
    """Run the plan's tasks (skipping what is committed), then its jury, then its report; ``echo``
    gets each line to show. A failed task stops the sweep before the jury, in one line."""
    if how.no_ray and how.ray:
        raise UserError("give --ray ADDRESS or --no-ray, not both")
    if how.cpus_per_task < 1:
        raise UserError(f"--cpus-per-task must be at least 1 (got {how.cpus_per_task})")
    if how.gpus_per_task is not None and how.gpus_per_task < 0:
        raise UserError(f"--gpus-per-task must be 0 or more (got {how.gpus_per_task})")
    check_specs(loaded_models(plan))  # a name the installed vLLM does not know: refused before anything loads
    prompt_file = jury_prompt_file(plan)

    # Every task checked first (inputs, a different config refused, committed parts verified), so a
    # mistake answers in one line before a cluster starts; finished shards are not scheduled.
    todo, runs, skipped = [], {}, 0
    for t in plan.tasks:
        prep = how.prepare_fn(t.job)
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
        from sleight.tamper.sweep.judging import judge

        judge(plan, prompt_file, progress=how.progress, echo=echo)
    if plan.config.report_out is not None:
        from sleight.tamper.report.meta import meta_of
        from sleight.tamper.report.report import write_report

        paths = write_report(plan.run_dirs, plan.config.report_out, site=plan.config.report_site, progress=how.progress, meta=meta_of(plan.config))
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


