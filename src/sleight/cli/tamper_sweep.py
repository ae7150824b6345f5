"""``sleight tamper sweep``: one ``tamper run --shard K/N`` per (model, shard), on Ray or in turn."""

from __future__ import annotations

import argparse
from pathlib import Path

from sleight.cli.common import add_model_args, add_progress_arg
from sleight.cli.tamper_run import add_trial_args, default_out
from sleight.errors import UserError


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``sweep`` to the ``tamper`` subcommands."""
    p = sub.add_parser(
        "sweep",
        help="run several models (and shards of each) as tasks on a Ray cluster, or one after another",
        description=(
            "One task per (model, shard): 'sleight tamper run --shard K/N' into OUT/<model>/. On a Ray cluster "
            "(--ray ADDRESS, or a local one started here) each task asks for --gpus-per-task GPUs where the cluster "
            "has GPUs, CPUs otherwise; without Ray (--no-ray, or Ray not installed) the tasks run one after another "
            "in this process. A rerun skips what is committed and resumes the rest. Judge and report the result with "
            "'sleight tamper judge --run OUT' and 'sleight tamper report OUT'."
        ),
    )
    p.add_argument(
        "--models", required=True, metavar="A,B,...", help="comma-separated model specs (names, folders, .gguf files, hub ids)"
    )
    p.add_argument("--shards", type=int, default=1, metavar="N", help="shards per model: N tasks per model (default: 1)")
    p.add_argument(
        "--out",
        type=Path,
        default=Path("runs/tamper-sweep"),
        metavar="OUT",
        help="sweep folder: one run directory per model (default: runs/tamper-sweep)",
    )
    p.add_argument(
        "--ray",
        default=None,
        metavar="ADDRESS",
        help="Ray cluster to join (auto, HOST:6379, ray://HOST:10001); default: start a local Ray cluster",
    )
    p.add_argument("--no-ray", action="store_true", help="run the tasks one after another in this process, without Ray")
    p.add_argument(
        "--gpus-per-task",
        type=float,
        default=None,
        metavar="G",
        help="GPUs per task (default: the engine's --tensor-parallel-size where the cluster has GPUs, 0 otherwise)",
    )
    p.add_argument(
        "--cpus-per-task",
        type=int,
        default=1,
        metavar="C",
        help="CPUs per task; on CPU also its torch threads unless --threads says otherwise (default: 1)",
    )
    add_progress_arg(p)
    add_trial_args(p)
    add_model_args(p, model=False)
    p.set_defaults(func=cmd_sweep)


def _passed_flags() -> list[argparse.Action]:
    """The ``tamper run`` flags a sweep passes on to every task."""
    scratch = argparse.ArgumentParser(add_help=False)
    add_trial_args(scratch)
    add_model_args(scratch, model=False)
    return [a for a in scratch._actions if a.option_strings]


def task_argv(args: argparse.Namespace, model: str, shard: str, out: Path, *, threads: int | None = None) -> list[str]:
    """The ``tamper run`` command line of one task: the sweep's own flags where they differ from the
    defaults, the model, its shard and its run directory."""
    argv = ["tamper", "run", "--model", model, "--shard", shard, "--out", str(out), "--no-progress"]
    for action in _passed_flags():
        value = getattr(args, action.dest, action.default)
        if action.dest == "threads" and value is None and threads is not None:
            value = threads
        if value == action.default or value is None:
            continue
        flag = max(action.option_strings, key=len)
        if isinstance(action, argparse._StoreTrueAction):
            argv.append(flag)
        else:
            argv += [flag, str(value)]
    return argv


def run_task(argv: list[str]) -> list[str]:
    """One task, in whatever process runs it (a Ray worker, or the sweep's own): ``tamper run``."""
    from sleight.cli.main import build_parser, quiet_libraries
    from sleight.cli.tamper_run import execute

    quiet_libraries()
    return execute(build_parser().parse_args(argv))


def cmd_sweep(args: argparse.Namespace) -> int:
    from sleight.cli.common import check_writable
    from sleight.cli.main import build_parser
    from sleight.cli.tamper_run import prepare
    from sleight.tamper import sweep

    if args.no_ray and args.ray:
        raise UserError("give --ray ADDRESS or --no-ray, not both")
    if args.cpus_per_task < 1:
        raise UserError(f"--cpus-per-task must be at least 1 (got {args.cpus_per_task})")
    if args.gpus_per_task is not None and args.gpus_per_task < 0:
        raise UserError(f"--gpus-per-task must be 0 or more (got {args.gpus_per_task})")
    check_writable(args.out, "--out")
    models = sweep.parse_models(args.models)
    tasks = sweep.plan_tasks(
        models, args.shards, args.out, lambda m: default_out(m).name, lambda m, s, out: task_argv(args, m, str(s), out)
    )

    # Every task checked here first (inputs, a different config refused, committed parts verified),
    # so a mistake answers in one line before a cluster starts; finished shards are not scheduled.
    parser = build_parser()
    todo, runs, skipped = [], {}, 0
    for t in tasks:
        prep = prepare(parser.parse_args(list(t.argv)))
        runs[t.name] = (t.out, len(prep.questions), len(prep.substitutes))
        if prep.left:
            todo.append(t)
        else:
            prep.nothing_to_do()
            skipped += 1
    display = sweep.Display(runs, enabled=not args.no_progress)
    if skipped:
        print(f"sweep: {skipped} of {len(tasks)} task(s) already committed in {args.out}; {len(todo)} to run")
    if not todo:
        display.close()
        print(
            f"sweep: nothing to do; judge with 'sleight tamper judge --run {args.out} --jury ...', report with 'sleight tamper report {args.out}'"
        )
        return 0

    ray = None if args.no_ray else sweep.import_ray(required=args.ray is not None)
    if ray is None:
        if not args.no_ray:
            print(
                f"sweep: Ray is not installed, so the {len(todo)} task(s) run one after another here (pip install 'sleight[ray]' to schedule them on a cluster)"
            )
        results = sweep.run_in_process(todo, run_task, display)
        where = "in this process"
    else:

        def argv_for(t: sweep.Task, gpus: float) -> list[str]:  # on CPU: torch threads = the task's CPUs
            return list(t.argv) if gpus else task_argv(args, t.model, str(t.shard), t.out, threads=args.cpus_per_task)

        tp = max(1, int(getattr(args, "tensor_parallel_size", 1) or 1))
        results, gpus = sweep.run_on_ray(
            ray,
            todo,
            run_task,
            display,
            address=args.ray,
            gpus=args.gpus_per_task,
            gpus_auto=float(tp),
            cpus=args.cpus_per_task,
            argv_for=argv_for,
        )
        where = f"on Ray ({args.ray or 'local cluster'}; {gpus:g} GPU(s), {args.cpus_per_task} CPU(s) per task)"
    failed = [r for r in results if not r.ok]
    for r in results:
        for line in r.lines:
            print(f"  {r.task.label}: {line}")
    for r in failed:
        print(f"  {r.task.label}: FAILED: {r.error}")
    print(f"sweep: {len(results) - len(failed)} of {len(results)} task(s) finished {where}; runs in {args.out}")
    if failed:
        raise UserError(
            f"{len(failed)} of {len(results)} sweep task(s) failed (listed above); run the same command again to resume them"
        )
    return 0
