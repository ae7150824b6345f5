"""``sleight tamper sweep``: one typed ``tamper run`` job per (model, shard), on Ray or in turn; from a
sweep file, then the jury and the report too. Parses, builds the plan, calls the library."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from sleight.cli.common import add_model_args, add_progress_arg
from sleight.cli.tamper_run import add_trial_args


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``sweep`` to the ``tamper`` subcommands."""
    p = sub.add_parser(
        "sweep",
        help="run several models (and shards of each) as tasks on a Ray cluster, or one after another; from a sweep file, then judge and report",
        description=(
            "One task per (model, shard): 'sleight tamper run --shard K/N' into OUT/<model>/. On a Ray cluster "
            "(--ray ADDRESS, or a local one started here) each task asks for --gpus-per-task GPUs where the cluster "
            "has GPUs, CPUs otherwise; without Ray (--no-ray, or Ray not installed) the tasks run one after another "
            "in this process. A rerun skips what is committed and resumes the rest. With --config FILE the models, "
            "their load settings, the trials, the jury and the report come from a YAML sweep file: its subjects run, "
            "then its jury judges them, then the report is written. Otherwise judge and report the result with "
            "'sleight tamper judge --run OUT' and 'sleight tamper report OUT'."
        ),
    )
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument(
        "--models", default=None, metavar="A,B,...", help="comma-separated model specs (names, folders, .gguf files, hub ids)"
    )
    what.add_argument(
        "--config", default=None, metavar="FILE",
        help="a sweep file (YAML: subjects with their load settings, run, jury, report; see docs/scale.md), or the "
        "name of a shipped one ('study': the study's 19 models and jury); flags given here with a value other than "
        "their default override the file",
    )  # fmt: skip
    p.add_argument("--dry-run", action="store_true", help="print the plan (tasks, GPU memory and time estimates per model, the jury, the report) and load nothing")
    p.add_argument("--shards", type=int, default=None, metavar="N", help="shards per model: N tasks per model (default: the file's, else 1)")
    p.add_argument(
        "--out",
        type=Path,
        default=None,
        metavar="OUT",
        help="sweep folder: one run directory per model (default: the file's out, else runs/tamper-sweep)",
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
        help="GPUs per task (default: the model's tensor x pipeline parallel size where the cluster has GPUs, 0 otherwise)",
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


def cli_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The trial and model settings this command line sets, by their field names: they override the
    sweep file. A model flag is set when given (every one defaults to None); a trial flag when it
    differs from :class:`TrialSettings`' default."""
    from dataclasses import asdict

    from sleight.cli.common import spec_fields_from_args
    from sleight.cli.tamper_run import trial_settings
    from sleight.tamper.job import TrialSettings

    given, default = asdict(trial_settings(args)), asdict(TrialSettings())
    return {k: v for k, v in given.items() if v != default[k]} | spec_fields_from_args(args)


def cmd_sweep(args: argparse.Namespace) -> int:
    from sleight.cli.common import check_writable
    from sleight.tamper.job import default_out
    from sleight.tamper.sweep import config as sweep_config
    from sleight.tamper.sweep.execute import Scheduling, execute
    from sleight.tamper.sweep.memory import plan_lines
    from sleight.tamper.sweep.plan import build_plan

    if args.config:
        config = sweep_config.load_config(args.config)
    else:
        config = sweep_config.models_config(sweep_config.parse_models(args.models), args.shards or 1, lambda m: default_out(m).name)
    plan = build_plan(config, args.out, cli_overrides(args), shards=args.shards)
    if args.dry_run:
        for line in plan_lines(plan):
            print(line)
        return 0
    check_writable(plan.out, "--out")
    how = Scheduling(args.ray, args.no_ray, args.gpus_per_task, args.cpus_per_task, not args.no_progress)
    return execute(plan, how, echo=print)
