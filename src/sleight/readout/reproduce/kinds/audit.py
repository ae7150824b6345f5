"""``audit`` runs: the audit command's library calls (:func:`~sleight.readout.audit.run.load_audit`,
:func:`~sleight.readout.audit.run.run_audit`); with ``condition`` (Table 3, App. I) the condition's
items over the same records."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sleight import rundir
from sleight.readout.reproduce.kinds.base import Rows, RunContext, RunKind, setting_int

FIELDS = (
    "preset",
    "variants",
    "stem",
    "max_new_tokens",
    "note",
    "instruct",
    "options",
    "condition",
)  # condition: App. I's (C0: Table 3)
# The data families a preset reads (the data layer's views: forecast, ptrue/grade/mcq).
FAMILIES = {"forecast": ("race-h",), "ptrue": ("race-h", "mmlu", "triviaqa"), "grade": ("summeval",), "": ("mmlu", "mmlu-pro")}


def audit_into(ctx: RunContext, items: Sequence[Any], config: Any) -> Rows:
    """Measure ``items`` into the run directory as ``readout audit`` would (a finished run with the
    same identity is only re-read, without loading the model; another is refused in one line)."""
    import pyarrow.parquet as pq

    from sleight.readout.audit.run import IDENTITY_KEYS, READINGS, rerender, run_audit, run_config
    from sleight.rundir import RunDir

    config.n_items = len(items)
    manifest = RunDir(ctx.run_dir, "audit").read_manifest() or {}
    same = rundir.identity(manifest.get("config") or {}, IDENTITY_KEYS) == rundir.identity(run_config(items, config), IDENTITY_KEYS)
    if manifest.get("completed") and same and (ctx.run_dir / READINGS).is_file():
        rerender(ctx.run_dir)
    else:
        run_audit(ctx.model(), items, ctx.run_dir, config, show_progress=ctx.progress)
    return pq.read_table(ctx.run_dir / READINGS).to_pylist()


def audit_rows(ctx: RunContext) -> Rows:
    from sleight.readout.audit.run import load_audit

    s = dict(ctx.spec.settings)
    variants = s.pop("variants", "all")
    condition = s.pop("condition", None)
    items, config, _name = load_audit(
        data=ctx.data,
        limit=ctx.limit,
        variants=",".join(variants) if isinstance(variants, list) else str(variants),
        rows_per_pass=ctx.model_spec.batch_size,
        **s,
    )
    if condition is not None:  # Table 3 / App. I: the condition's items (C0: the fixed note) over the same records
        from sleight.readout.audit.conditions import condition_items
        from sleight.readout.data import load_data

        records = load_data(ctx.data).view("forecast", ctx.limit)
        items = condition_items(str(condition), records, n=len(records))
    rows = audit_into(ctx, items, config)
    from sleight.readout.audit.measure import derived_columns

    # the readings, with the paper's App. C/D readings of them (form, ending, token rules, per-variant checks)
    return derived_columns(rows)


def _columns() -> tuple[str, ...]:
    from sleight.readout.audit.measure import DERIVED, SCHEMA

    return (*SCHEMA.names, *DERIVED)


def _values() -> dict[str, tuple[str, ...]]:
    from sleight.readout.audit.variants import KNOWN_VARIANTS

    return {"variant": tuple(KNOWN_VARIANTS)}


def _per_item(s: Mapping[str, Any]) -> tuple[int, int]:
    from sleight.errors import UserError
    from sleight.readout.audit.variants import parse_variants

    variants = s.get("variants")
    try:  # named sets (composed, space-appended, separator) counted by their members
        n = len(parse_variants(",".join(variants) if isinstance(variants, list) else variants))
    except UserError:
        n = 12
    return n, n * setting_int(s, "max_new_tokens", 16)


def _check(s: Mapping[str, Any]) -> str | None:
    from sleight.readout.audit.presets import PRESETS

    preset = s.get("preset")
    if preset is not None and preset not in PRESETS:
        return f"preset: '{preset}' is not a preset ({', '.join(PRESETS)})"
    variants = s.get("variants")
    if variants is not None:
        from sleight.errors import UserError
        from sleight.readout.audit.variants import parse_variants

        try:
            parse_variants(",".join(map(str, variants)) if isinstance(variants, list) else str(variants))
        except UserError as exc:
            return f"variants: {exc}"
    if s.get("condition") is not None:
        from sleight.readout.audit.conditions import CONDITIONS

        if s["condition"] not in CONDITIONS or preset != "forecast":
            return f"condition: expected one of {', '.join(CONDITIONS)} with preset forecast"
    return None


KINDS = (
    RunKind(
        "audit",
        fields=lambda: FIELDS,
        columns=_columns,
        values=_values,
        families=lambda s: FAMILIES[str(s.get("preset") or "")],
        per_item=_per_item,
        rows=audit_rows,
        check=_check,
        target="target",
        unit="item_id",
        context_tokens=250,
    ),
)
