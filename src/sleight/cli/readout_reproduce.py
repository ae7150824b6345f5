"""``sleight readout reproduce TABLE``: one command per table of the paper.

Argument parsing only: :func:`sleight.readout.reproduce.reproduce` runs every checkpoint's readout
runs of the table's shipped config (``src/sleight/data/tables/TABLE.yaml``) into ``--out/TABLE/``,
resuming, and writes ``table.md``, ``table.csv``, ``table.tex`` and ``table.json``.
"""

from __future__ import annotations

import argparse

from sleight.cli.common import add_model_args, add_progress_arg, check_writable, model_spec_from_args
from sleight.errors import UserError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "reproduce",
        help="one command per table of the paper: run what is missing (resuming), aggregate over checkpoints, write the table",
        description=(
            "Run the readout runs a table of the paper needs for each of its checkpoints (resuming finished and killed runs), "
            "aggregate across checkpoints on shared bootstrap replicates, and write the table in the paper's layout as "
            "table.md, table.csv and table.tex (with the paper's numbers beside, where known) under --out/TABLE/. "
            "--list shows the shipped tables. See docs/readout.md, 'Reproducing the paper's tables'."
        ),
    )
    p.add_argument("table", nargs="*", metavar="TABLE", help="a shipped table (table2, 2, appendix-g ...), 'all', or a table .yaml")
    p.add_argument("--list", action="store_true", help="list the shipped items with their checkpoints and needs (GPU memory, items, forward passes) and exit")
    p.add_argument("--dry-run", action="store_true", help="print the plan (items, passes, memory, estimated GPU-hours per checkpoint) and exit; no hub, no model")
    p.add_argument("--models", default=None, metavar="M1,M2", help="checkpoints instead of the table's own (names, folders, hub ids)")
    p.add_argument("--limit", type=int, default=None, metavar="N", help="the first N items of each run's data (default: the table's)")
    p.add_argument(
        "--data-source", default="auto", choices=["auto", "paper", "fixture"],
        help="paper: the paper's data; fixture: the small shipped fixture files; auto (default): the paper's where its source can be read, else the fixture (said in the table)",
    )
    p.add_argument("--data", action="append", default=[], metavar="SPEC", help="a data spec replacing the table's for its family, e.g. race-h:PATH/test.parquet:n=500 (repeatable; docs/data.md)")
    p.add_argument("--out", default="runs/reproduce", metavar="DIR", help="output folder; each table under DIR/TABLE/ (default: runs/reproduce)")
    p.add_argument("--B", type=int, default=None, help="bootstrap replicates (default: the table's)")
    p.add_argument("--seed", type=int, default=None, help="bootstrap seed (default: the table's)")
    add_progress_arg(p)
    add_model_args(p, batch_size=64, model=False)
    p.set_defaults(func=cmd_reproduce)


def cmd_reproduce(args: argparse.Namespace) -> int:
    from sleight.readout.reproduce import ModelCache, load_table, reproduce, shipped_tables
    from sleight.readout.reproduce.plan import dry_run_lines, list_lines
    from sleight.readout.reproduce.runner import check_specs, select_checkpoints

    if args.list:
        for name in shipped_tables():
            print("\n".join(list_lines(load_table(name))))
        return 0
    if not args.table:
        raise UserError("name a table (sleight readout reproduce --list shows them), or 'all'")
    names = shipped_tables() if args.table == ["all"] else args.table
    configs = [load_table(n) for n in names]  # every config checked before anything runs
    models = [m.strip() for m in args.models.split(",") if m.strip()] if args.models else None
    if args.limit is not None and args.limit < 1:
        raise UserError(f"--limit must be at least 1, got {args.limit}")
    first = select_checkpoints(configs[0], models)
    base = model_spec_from_args(args, model=first[0].model if first else None, resolve_dtype=False)  # each checkpoint's derives from it
    cache = ModelCache(base)
    check_specs(configs, models, cache)  # every table's checkpoint specs, before anything runs
    if args.dry_run:
        for config in configs:
            print("\n".join(dry_run_lines(config, select_checkpoints(config, models), args.limit, dtype=base.dtype)))
        return 0
    check_writable(args.out, "--out")
    try:
        for config in configs:
            result = reproduce(
                config, args.out, models=models, limit=args.limit, data=args.data_source, overrides=args.data, B=args.B, seed=args.seed,
                cache=cache, progress=not args.no_progress,
            )
            print(f"{config.name} -> {', '.join(str(p) for p in result.files.values())}")
    finally:
        cache.close()
    return 0
