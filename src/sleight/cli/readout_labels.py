"""``sleight readout labels`` (people label an audit's continuations on a page served from the audit
directory) and ``sleight readout agreement`` (Fleiss' κ between the people, Cohen's κ of the judges
against them)."""

from __future__ import annotations

import argparse
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``labels`` and ``agreement`` to the ``sleight readout`` subcommands."""
    p = sub.add_parser(
        "labels",
        help="people label an audit's continuations with the readout judge's classes (a page served from the audit)",
        description=(
            "Write AUDIT/labels/index.html and serve it on a loopback address: people give their name and label each "
            "greedy continuation of the audit with one of the readout judge's classes (instruction / item / forecast / "
            "other). Every save is committed at once to AUDIT/human_labels.parquet/ (one row per continuation and "
            "labeller; opening the page again resumes). The judges' classes, where 'sleight readout judge' ran, stay "
            "hidden until a continuation is labelled. --export / --import move labels between machines."
        ),
    )
    p.add_argument("run", type=Path, metavar="AUDIT_DIR", help="a directory written by 'sleight readout audit'")
    p.add_argument("--labeller", metavar="NAME", help="fill in the page's name field (each person labels under their own name)")
    p.add_argument("--variants", metavar="LIST", help="comma-separated variants to label ('judged': the readout judge's); default: every measured one")
    p.add_argument("--sample", type=int, metavar="N", help="draw N continuations for people to label, stratified by variant group and the jury's class, into AUDIT/labels_sample.json")
    p.add_argument("--seed", type=int, default=0, metavar="S", help="random seed of --sample (default: 0; the same seed draws the same sample)")
    p.add_argument("--all", action="store_true", help="offer every continuation, even when a sample was drawn")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="port (default: 8000; 0 picks a free one)")
    p.add_argument("--no-serve", action="store_true", help="write the page (and do --import/--export) without serving it")
    p.add_argument("--export", type=Path, metavar="FILE", help="write every stored label to FILE (JSON) and exit")
    p.add_argument("--import", dest="imports", type=Path, action="append", default=[], metavar="FILE", help="store the labels of an exported FILE (repeatable), then exit")
    p.set_defaults(func=cmd_labels)

    a = sub.add_parser(
        "agreement",
        help="κ between the people who labelled an audit's continuations and against the judges",
        description=(
            "From AUDIT/human_labels.parquet/: Fleiss' kappa between the people, Cohen's kappa for each pair of people, "
            "and Cohen's kappa of each readout juror, the jury's majority and the rule classes against the people's "
            "majority, overall and per variant group; written to AUDIT/human_agreement.md and .csv and printed."
        ),
    )
    a.add_argument("run", type=Path, metavar="AUDIT_DIR", help="a directory written by 'sleight readout audit' and labelled by people")
    a.set_defaults(func=cmd_agreement)


def _check_dir(run: Path) -> None:
    from sleight.cli.common import check_writable
    from sleight.errors import UserError

    if not run.is_dir():
        raise UserError(f"audit directory {run} does not exist")
    check_writable(run, "AUDIT_DIR")


def cmd_labels(args: argparse.Namespace) -> int:
    from sleight import rundir
    from sleight.errors import UserError
    from sleight.readout.audit import labels, labels_page

    _check_dir(args.run)
    if args.labeller is not None:
        labels.check_labeller(args.labeller)
    variants = [v.strip() for v in args.variants.split(",") if v.strip()] if args.variants else None
    targets = labels.targets(args.run, variants)
    offered = labels.offered_of(labels.targets(args.run) if variants else targets)
    votes, verdicts, jury = labels.judge_tables(args.run)
    labels.load_labels(args.run, repair=True)
    labels.compact_labels(args.run)
    for path in args.imports:
        n = labels.save_labels(args.run, labels.read_export(path), offered)
        print(f"stored {n} label(s) from {path}")
    if args.export:
        stored = labels.load_labels(args.run)
        rundir.write_json(args.export, labels.export_obj(stored, args.run.name))
        print(f"wrote {len(stored)} label(s) to {args.export}")
    if args.sample is not None:
        sample = labels.draw_labels_sample(targets, verdicts, args.sample, args.seed)
        path = labels.write_labels_sample(args.run, sample, seed=args.seed, requested=args.sample)
        print(f"drew {len(sample)} of {len(targets)} continuations, seed {args.seed}, into {path}")
        for name, n in sample["stratum"].value_counts().sort_index().items():
            print(f"  {n:>3}  {name}")
    drawn = set(labels.load_labels_sample(args.run))
    if drawn and not args.all:
        keep = [(str(i), str(v)) in drawn for i, v in zip(targets["item_id"], targets["variant"])]
        targets = targets[keep].reset_index(drop=True)
        if not len(targets):
            raise UserError(f"none of the continuations drawn into {args.run / labels.SAMPLE_FILE} is among those asked for; --all offers every one")
        print(f"offering the {len(targets)} drawn continuation(s) of {args.run / labels.SAMPLE_FILE} (--all: every one)")
    page = labels_page.write_page(args.run, labels_page.page_data(targets, votes, verdicts, jury, args.run.name))
    print(f"{len(targets)} continuation(s) to label; page: {page}")
    if args.no_serve or args.export or args.imports:
        return 0
    if not 0 <= args.port <= 65535:
        raise UserError(f"--port {args.port} is not a port")
    from urllib.parse import quote

    suffix = f"?labeller={quote(args.labeller)}" if args.labeller else ""

    def ready(url: str) -> None:
        print(f"label at {url}{suffix}  (labels go to {args.run / labels.LABELS_DIR}; Ctrl-C stops)", flush=True)

    labels_page.serve(args.run, offered, host=args.host, port=args.port, ready=ready)
    print(f"then: sleight readout agreement {args.run}")
    return 0


def cmd_agreement(args: argparse.Namespace) -> int:
    from sleight.readout.audit import labels

    _check_dir(args.run)
    _, md, csv = labels.write_agreement(args.run)
    print(md.read_text(encoding="utf-8"), end="")
    print(f"\nwrote {md} and {csv}")
    return 0
