"""Run what a table needs, resuming, then aggregate and write it: ``sleight readout reproduce``.

For each checkpoint and each run of the table's config, the run's kind (:mod:`.kinds`: the readout
commands' own library calls, one module a kind) writes its run directory
``OUT/<table>/<checkpoint>/<run>/``. Those directories resume as the
commands' own do: a finished run loads no model and is only re-scored, a killed one redoes at most
one part, a changed configuration is refused in one line. A run that another table of the same
``OUT`` already finished with the same checkpoint, data and settings is copied, not run again
(``runs.json`` beside the runs records what each one is). The model of a checkpoint is loaded once,
when some run has work left, and shared by its runs (and by the next table's, for the same
checkpoint).

Data: each run names the paper's data spec and a shipped fixture. ``data="paper"`` reads the paper's
(the hub, or a file given with ``overrides``), ``"fixture"`` the shipped fixture files, ``"auto"``
the paper's where its source can be used and otherwise the fixture, said on stderr and in the
table's notes.
"""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sleight import rundir
from sleight.backends.resolve import DEFAULT_MODEL
from sleight.backends.spec import ModelSpec
from sleight.errors import UserError
from sleight.readout.data.fixtures import fixtures_dir
from sleight.readout.reproduce import kinds
from sleight.readout.reproduce.aggregate import TableResult, aggregate
from sleight.readout.reproduce.config import (
    SOURCES,
    Checkpoint,
    RunSpec,
    TableConfig,
    load_table,
)
from sleight.readout.reproduce.kinds import Rows, RunContext, checkpoint_spec, run_settings
from sleight.readout.reproduce.writers import WRITERS

RUNS_JSON = "runs.json"


class ModelCache:
    """One loaded model at a time: the checkpoint's, loaded on first need, closed for the next.

    ``base``: the command's :class:`ModelSpec`, from which each checkpoint's own is derived
    (:func:`~.kinds.checkpoint_spec`); ``loader`` loads a checkpoint's spec (default: ``load_model``)."""

    def __init__(self, base: ModelSpec | None = None, loader: Callable[[ModelSpec], Any] | None = None) -> None:
        self.base = base or ModelSpec(DEFAULT_MODEL, batch_size=64)
        self.loader = loader or load_model_spec
        self.name: tuple[str, str | None] | None = None
        self.model: Any = None
        self.loads = 0

    def spec(self, ck: Checkpoint, dtype: str | None = None) -> ModelSpec:
        """``ck``'s spec; ``dtype``: the table's pinned dtype (the command's ``--dtype`` wins)."""
        return checkpoint_spec(ck, self.base, dtype)

    def get(self, ck: Checkpoint, dtype: str | None = None) -> Any:
        spec = self.spec(ck, dtype)
        if self.name != (ck.name, spec.dtype):  # the same checkpoint in another table's dtype is another model
            self.close()
            self.model = self.loader(spec)
            self.name = (ck.name, spec.dtype)
            self.loads += 1
        return self.model

    def close(self) -> None:
        if self.model is not None and hasattr(self.model, "close"):
            self.model.close()
        self.model, self.name = None, None


def load_model_spec(spec: ModelSpec) -> Any:
    from sleight.backends import load_model

    return load_model(spec)


def check_specs(configs: Sequence[TableConfig], models: Sequence[str] | None, cache: ModelCache) -> None:
    """Every checkpoint's spec of every table a command names, before anything runs: a setting a
    checkpoint refuses (``--revision`` on a bundled model) is one line; so are flags about the
    weights or the engine when every table named reads only tokenizers (App. C.6), since nothing
    would read them. Where another table reads them, a tokenizer-only table notes them
    (:func:`unread_flags`)."""
    for config in configs:
        for ck in select_checkpoints(config, models):
            cache.spec(ck, config.dtype)
    given = cache.base.beyond_tokenizer()
    if given and configs and all(unread_flags(c, cache.base) for c in configs):
        names = ", ".join(c.name for c in configs)
        raise UserError(
            f"{names} read{'s' if len(configs) == 1 else ''} each checkpoint's tokenizer only and load{'s' if len(configs) == 1 else ''} "
            f"no weights: {', '.join(given)} mean{'s' if len(given) == 1 else ''} nothing there (drop {'it' if len(given) == 1 else 'them'})"
        )


def unread_flags(config: TableConfig, base: ModelSpec) -> list[str]:
    """The flags about the weights or the engine that ``config`` does not read: all those given, for a
    table whose runs read only tokenizers (App. C.6); none for any other."""
    from sleight.readout.reproduce import kinds

    if config.runs and all(kinds.kind(spec.command).tokenizer_only for spec in config.runs.values()):
        return base.beyond_tokenizer()
    return []


def select_checkpoints(config: TableConfig, models: Sequence[str] | None) -> list[Checkpoint]:
    """The config's checkpoints, or ``models`` (a checkpoint's name or model id keeps its settings;
    any other model spec runs with none)."""
    if not models:
        return list(config.checkpoints)
    known = {c.name: c for c in config.checkpoints} | {c.model: c for c in config.checkpoints}
    out: list[Checkpoint] = []
    for m in models:
        ck = known.get(m) or Checkpoint(name=m.strip("/").replace("/", "--"), model=m, label=m)
        if ck.name in {c.name for c in out}:
            raise UserError(f"--models names {m} twice")
        out.append(ck)
    return out


def parse_overrides(specs: Sequence[str]) -> dict[str, str]:
    """``--data SPEC`` (repeatable): the spec replaces the config's for its family."""
    from sleight.readout.data import FAMILIES, is_data_spec

    out: dict[str, str] = {}
    for s in specs:
        if not is_data_spec(s):
            raise UserError(f"--data '{s}': expected FAMILY:WHERE[:key=value...] with FAMILY one of {', '.join(FAMILIES)}")
        family = s.partition(":")[0]
        if family in out:
            raise UserError(f"--data gives {family} twice")
        out[family] = s
    return out


def resolve_data(spec: RunSpec, source: str, overrides: Mapping[str, str]) -> tuple[str, str]:
    """(the data spec a run reads, what it is: ``paper``, ``given``, or ``fixture`` with the reason)."""
    from sleight.readout.data import FAMILIES
    from sleight.readout.data.common import hub_reachable, parse_spec

    if source not in SOURCES:
        raise UserError(f"--data-source must be one of {', '.join(SOURCES)}, got {source!r}")
    family = spec.paper_data.partition(":")[0]
    if family in overrides:
        return overrides[family], "given with --data"
    if source == "fixture":
        return spec.fixture_spec(), "shipped fixture"
    parsed = parse_spec(spec.paper_data, tuple(FAMILIES))
    why = hub_reachable() if parsed.is_hub else None
    if source == "paper" or why is None:
        return spec.paper_data, "the paper's data"
    return spec.fixture_spec(), f"shipped fixture (the paper's {spec.paper_data} cannot be read: {why})"


def _identity(spec: RunSpec, ck: Checkpoint, data: str, limit: int | None, model: ModelSpec) -> dict[str, Any]:
    load = model.load_record()
    return {
        "model": model.model, "chat_template_kwargs": dict(model.chat_template_kwargs), "engine": model.engine,
        "dtype": model.dtype, **({"load": load} if load else {}), "command": spec.command, "data": data, "limit": limit,
        "settings": run_settings(spec, ck),
    }


def _finished(run_dir: Path) -> bool:
    return (run_dir / "readings.parquet").is_file() and (run_dir / "manifest.json").is_file()


def _reuse(out: Path, table: str, ck: Checkpoint, run: str, identity: Mapping[str, Any]) -> Path | None:
    """A finished run of another table in ``out`` with the same identity, to copy."""
    for rec in sorted(out.glob(f"*/{ck.name}/{RUNS_JSON}")):
        if rec.parent.parent.name == table:
            continue
        try:
            runs = json.loads(rec.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        for name, ident in runs.items():
            src = rec.parent / name
            if ident == json.loads(json.dumps(identity)) and _finished(src):
                return src
    return None


def _record(ck_dir: Path, run: str, identity: Mapping[str, Any]) -> None:
    path = ck_dir / RUNS_JSON
    runs = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    runs[run] = identity
    rundir.write_json(path, runs)


def run_one(
    ck: Checkpoint, spec: RunSpec, run_dir: Path, data: str, limit: int | None, models: ModelCache, *, B: int, seed: int, progress: bool,
    dtype: str | None = None,
) -> Rows:
    """One readout run of one checkpoint into ``run_dir`` (resumed or finished as the command would);
    its readings. ``dtype``: the table's pinned dtype."""
    ctx = RunContext(ck, spec, run_dir, data, limit, models.spec(ck, dtype), lambda: models.get(ck, dtype), B, seed, progress)
    return kinds.kind(spec.command).rows(ctx)


def _notes(config: TableConfig, plan: Mapping[str, tuple[str, str]], n: int | None, given_models: bool, say: Callable[[str], None]) -> list[str]:
    """The table's notes on what this reproduction read and changed (a fixture is also said aloud)."""
    notes = [f"Run `{name}` ({spec.command}): {_short(plan[name][0])}, {plan[name][1]}." for name, spec in config.runs.items()]
    for name, (_spec_text, what) in plan.items():
        if what.startswith("shipped fixture"):
            say(f"{config.name}: run {name} reads the {what}; its numbers are not comparable with the paper's")
    if n is not None:
        notes.append(f"First {n} items of each run's data (--limit).")
    if given_models:
        notes.append("Checkpoints given with --models, not the table's own.")
    if config.inferred:
        notes.append(f"Inferred, not taken from the paper: {config.inferred}")
    return notes + list(config.notes)


@dataclass
class ReproduceResult:
    table: TableResult
    out: Path
    files: dict[str, Path]
    runs: list[dict[str, Any]]


def _short(spec: str) -> str:
    return spec.replace(str(fixtures_dir()), "{fixtures}")


def reproduce(
    table: str | Path | TableConfig,
    out: str | Path = "runs/reproduce",
    *,
    models: Sequence[str] | None = None,
    limit: int | None = None,
    data: str = "auto",
    overrides: Sequence[str] = (),
    base: ModelSpec | None = None,
    B: int | None = None,
    seed: int | None = None,
    cache: ModelCache | None = None,
    progress: bool = False,
    status: Callable[[str], None] | None = None,
) -> ReproduceResult:
    """Run (or resume) every checkpoint's runs of ``table`` into ``out/<table>/``, aggregate on shared
    replicates, and write ``table.md``, ``table.csv``, ``table.tex`` and ``table.json`` there.

    ``models`` replaces the config's checkpoints, ``limit`` its item count, ``overrides`` (data specs)
    the paper's data of their family; ``base`` is the command's model spec (its flags; each
    checkpoint's is derived from it), ``cache`` shares loaded models between calls (several tables)."""
    config = table if isinstance(table, TableConfig) else load_table(table)
    if limit is not None and limit < 1:
        raise UserError(f"--limit must be at least 1, got {limit}")
    if B is not None and B < 1:
        raise UserError(f"--B must be a positive number of replicates, got {B}")
    say = status or (lambda m: print(m, file=sys.stderr, flush=True))
    own_cache = cache is None
    models_cache = cache or ModelCache(base)
    B_, seed_ = (config.B if B is None else B), (config.seed if seed is None else seed)
    n = config.limit if limit is None else limit
    checkpoints = select_checkpoints(config, models)
    for ck in checkpoints:  # a setting a checkpoint refuses (--revision on a bundled model) is one line before any run
        models_cache.spec(ck, config.dtype)
    given = parse_overrides(overrides)
    plan = {name: resolve_data(spec, data, given) for name, spec in config.runs.items()}
    notes = _notes(config, plan, n, bool(models), say)
    unread = unread_flags(config, models_cache.base)
    if unread:  # a command naming only such tables refuses them (check_specs); beside others they are noted
        notes.append(f"Given and not read here (each checkpoint's tokenizer only, no weights): {', '.join(unread)}.")
        say(f"{config.name}: reads tokenizers only; {', '.join(unread)} not read here")
    root = Path(out)
    table_dir = root / config.name
    readings: dict[str, dict[str, list[dict[str, Any]]]] = {}
    done: list[dict[str, Any]] = []
    if not config.runnable:  # one line, and the table with the paper's cells only
        why = config.unreproducible or config.pending
        say(f"{config.name}: {'cannot be reproduced here' if config.unreproducible else 'not runnable yet'}: {why}")
        result = aggregate(config, checkpoints, {}, B=B_, seed=seed_, notes=[*notes, f"Not reproduced: {why}"])
        return ReproduceResult(result, table_dir, write_table(result, table_dir), [])
    try:
        for ck in checkpoints:
            ck_dir = table_dir / ck.name
            readings[ck.name] = {}
            for name, spec in config.runs.items():
                spec_text = plan[name][0]
                run_dir = ck_dir / name
                identity = _identity(spec, ck, spec_text, n, models_cache.spec(ck, config.dtype))
                if not run_dir.exists():
                    src = _reuse(root, config.name, ck, name, identity)
                    if src is not None:
                        say(f"{config.name}/{ck.name}/{name}: the same run is finished in {src}; copied")
                        shutil.copytree(src, run_dir)
                say(f"{config.name}/{ck.name}/{name}: readout {spec.command} ({_short(spec_text)})")
                readings[ck.name][name] = run_one(
                    ck, spec, run_dir, spec_text, n, models_cache, B=B_, seed=seed_, progress=progress, dtype=config.dtype
                )
                _record(ck_dir, name, identity)
                done.append({"checkpoint": ck.name, "run": name, "dir": str(run_dir), "data": spec_text, "source": plan[name][1]})
    finally:
        if own_cache:
            models_cache.close()
    result = aggregate(config, checkpoints, readings, B=B_, seed=seed_, notes=notes)
    files = write_table(result, table_dir, runs=done)
    return ReproduceResult(result, table_dir, files, done)


def write_table(result: TableResult, out: Path, *, runs: Sequence[Mapping[str, Any]] = ()) -> dict[str, Path]:
    """table.md, table.csv, table.tex and table.json (every cell, the leave-one-out shifts, the runs)."""
    out.mkdir(parents=True, exist_ok=True)
    files = {name: rundir.write_text(out / name, fn(result)) for name, fn in WRITERS.items()}
    record = {
        "table": result.name,
        "title": result.title,
        "B": result.B,
        "seed": result.seed,
        "level": result.level,
        "columns": [{"key": c.key, "label": c.label, "run": c.run, "metric": c.metric, "stat": c.stat} for c in result.columns],
        "rows": [
            {"name": r.name, "label": r.label, "kind": r.kind, "members": list(r.members), "cells": {k: c.as_dict() for k, c in r.cells.items()}}
            for r in result.rows
        ],
        "section": result.section,
        "status": result.status,
        "paper": result.paper,
        "paper_intervals": {r: {k: list(v) for k, v in cells.items()} for r, cells in result.paper_ci.items()},
        "leave_one_out": result.leave_one_out,
        "summaries": [sc.as_dict() for sc in result.summaries],
        "notes": list(result.notes),
        "runs": list(runs),
    }
    files["table.json"] = rundir.write_json(out / "table.json", record)
    return files
