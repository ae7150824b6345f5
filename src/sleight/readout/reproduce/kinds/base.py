"""What ``reproduce`` knows of one kind of readout run (:class:`RunKind`), and what a run is handed
(:class:`RunContext`). Each kind lives in a module of its own under :mod:`..kinds`; the config
checker, the plan and the runner ask the kind, never a chain of ``if command == ...``."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sleight.backends.spec import ModelSpec
from sleight.readout.reproduce.spec import Checkpoint, RunSpec

Rows = list[dict[str, Any]]


@dataclass(frozen=True)
class RunContext:
    """One run of one checkpoint: where it writes (``run_dir``, resumed as the command's own run
    directory would be), what it reads (``data``, ``limit`` items), its model (``model()`` loads it
    on first need and shares it with the checkpoint's other runs) and the table's bootstrap."""

    checkpoint: Checkpoint
    spec: RunSpec
    run_dir: Path
    data: str
    limit: int | None
    model_spec: ModelSpec  # how the checkpoint loads (:func:`checkpoint_spec`)
    model: Callable[[], Any]
    B: int
    seed: int
    progress: bool = False

    @property
    def run_settings(self) -> dict[str, Any]:
        return run_settings(self.spec, self.checkpoint)


def _no_values() -> dict[str, tuple[str, ...]]:
    return {}


def _no_check(_settings: Mapping[str, Any]) -> str | None:
    return None


@dataclass(frozen=True)
class RunKind:
    """One ``command`` a table's run may name.

    ``fields``: the settings a run may carry; ``columns``/``values``: its readings' columns and the
    values a column may take (a config's ``where`` is checked against them); ``families``: the data
    families that serve it (given its settings); ``target``/``unit``/``pair``: a metric's default
    target column, the bootstrap unit, the columns that pair two selections of the same rows;
    ``per_item``: (prefilled contexts, decoded tokens) an item costs, for the plan; ``context_tokens``:
    a prompt's typical length (assumed, for the plan); ``check``: one line on settings it refuses;
    ``rows``: run (or resume) and return the readings; ``tokenizer_only``: it reads the checkpoint's
    tokenizer and never its weights (App. C.6), so the plan counts no GPU memory."""

    name: str
    fields: Callable[[], tuple[str, ...]]
    columns: Callable[[], tuple[str, ...]]
    families: Callable[[Mapping[str, Any]], tuple[str, ...]]
    per_item: Callable[[Mapping[str, Any]], tuple[int, int]]
    rows: Callable[[RunContext], Rows]
    target: str = "correct"
    unit: str = "item_id"
    pair: tuple[str, ...] = ("item_id",)
    context_tokens: int = 300
    values: Callable[[], dict[str, tuple[str, ...]]] = _no_values
    check: Callable[[Mapping[str, Any]], str | None] = _no_check
    tokenizer_only: bool = False


def checkpoint_spec(ck: Checkpoint, base: ModelSpec, dtype: str | None = None) -> ModelSpec:
    """How ``ck`` loads: the command's spec (its model flags) with the checkpoint's model, and the
    command's chat-template variables over the checkpoint's own (checked again, so a flag that
    means nothing for this checkpoint, such as ``--revision`` on a bundled model, is refused).
    The weights' dtype: the command's ``--dtype`` where given, else the table's (``dtype``, the one
    the paper ran in), else the engine's default."""
    from sleight.backends import default_dtype

    return base.with_(
        model=ck.model, chat_template_kwargs={**ck.chat_template_kwargs, **base.chat_template_kwargs},
        dtype=base.dtype or dtype or default_dtype(base.engine),
    )


def run_settings(spec: RunSpec, ck: Checkpoint) -> dict[str, Any]:
    """A run's command settings for one checkpoint: the config's, and where the run samples at each
    checkpoint's own generation settings (App. E), the sampling settings its ``generation_config``
    sets over the library's defaults: the checkpoint's own file where it can be read here (a bundled
    model, a folder, the hub cache at the pinned revision), else the values the config records."""
    out = dict(spec.settings)
    if spec.sampling_from == "generation_config":
        from sleight.backends.resolve import own_generation_config
        from sleight.readout.ptrue.answers import generation_sampling

        own = own_generation_config(ck.model, ck.revision)
        out.update(decode="sampled", **generation_sampling(ck.generation_config if own is None else own))
    return out


def single_pass(
    ctx: RunContext, kind: str, config: Mapping[str, object], schema: Any, units: int, compute: Callable[[], Rows], model_info: Callable[[], Any] = lambda: None,
) -> Rows:
    """A run read in one pass into ``readings.parquet`` of a :mod:`sleight.rundir` run directory of its
    own ``kind`` (``schema`` a pyarrow schema; every ``config`` key is its identity): a finished run is
    only re-read, a killed one reads again, one made with other inputs is refused in one line.
    ``model_info``: the model record of the run (None where no model is read: App. C.6's tokenizers)."""
    import pyarrow.parquet as pq

    from sleight import rundir
    from sleight.rundir import RunDir

    run = RunDir(ctx.run_dir, kind, identity_keys=tuple(config))
    manifest = run.check(config)
    path = ctx.run_dir / "readings.parquet"
    if not (manifest and manifest.get("completed") and path.is_file()):
        session = run.open(config, model_info(), units=units)
        completed = False
        try:
            rundir.write_table(path, rundir.table_from_rows(compute(), schema), schema=schema, tmp_dir=session.tmp_dir)
            session.committed(units)
            completed = True
        finally:
            session.finish(completed)
    return pq.read_table(path, schema=schema).to_pylist()


def setting_int(settings: Mapping[str, object], key: str, default: int) -> int:
    """An integer setting for the plan (the default where it is absent or not a number)."""
    v = settings.get(key, default)
    return int(v) if isinstance(v, (int, float)) else default
