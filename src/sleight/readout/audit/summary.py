"""An audit's summary.json as typed, frozen records (issue #27 item 5).

:func:`sleight.readout.audit.checks.summarise` builds an :class:`AuditSummary`; the checks and the
reports read its attributes. The file on disk keeps its shape: :meth:`AuditSummary.as_json` writes
exactly the JSON the audit always wrote, and :meth:`AuditSummary.from_json` reads it back, old run
directories included (a key they lack takes its default).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

MASS_FLOOR = 0.5  # the option-mass floor of the checks (here so that a summary without one reads back)
INTERVAL_KEYS = ("mass_interval", "mass_undecided")


def at_floor(low: float | None, high: float | None, floor: float) -> bool | None:
    """Whether the option mass is at or above ``floor`` for its whole interval ``[low, high]``:
    True, False, or None when the interval holds the floor (undecided) or there is no mass."""
    if low is None or high is None or not (math.isfinite(low) and math.isfinite(high)):
        return None
    if low >= floor:
        return True
    return False if high < floor else None


def mass_interval(row: Mapping[str, Any]) -> tuple[float | None, float | None]:
    """A reading's mass as ``(low, high)``: its bounds where recorded (readings made before the
    bounds were, give the point mass twice); None where there is none."""
    def num(v: Any) -> float | None:  # a table's missing value (None or NaN) as None
        return None if v is None or not math.isfinite(v) else float(v)

    low, high = num(row.get("option_mass_low")), num(row.get("option_mass_high"))
    if low is None and high is None:
        return num(row.get("option_mass")), num(row.get("option_mass"))
    return low, high


@dataclass(frozen=True)
class DownstreamMetric:
    """Does the score rank the target: AUROC (binary target) or Spearman's rho, on ``n`` items."""

    metric: str
    value: float
    n: int

    def as_json(self) -> dict[str, object]:
        return {"metric": self.metric, "value": self.value, "n": self.n}

    @classmethod
    def from_json(cls, d: Mapping[str, Any] | None) -> DownstreamMetric | None:
        return None if not d else cls(str(d["metric"]), float(d["value"]), int(d["n"]))


@dataclass(frozen=True)
class VariantSummary:
    """One variant's numbers. The counts are always there; the measured numbers only when some row
    was measured (``n_measured > 0``), as summary.json has always had them. Field names are the
    JSON keys."""

    n_items: int = 0
    n_measured: int = 0
    n_skipped: int = 0
    skip_reasons: tuple[str, ...] = ()
    mass_median: float | None = None
    mass_min: float | None = None
    mass_below_floor: int | None = None
    mass_null: int | None = None
    mass_isolated_median: float | None = None
    mass_divergent_median: float | None = None
    boundary_preserved_rate: float | None = None
    answer_letter_rate: float | None = None
    option_argmax_rate: float | None = None
    distinct_rate: float | None = None
    on_task_rate: float | None = None
    argmax_classes: Mapping[str, int] | None = None
    continuation_classes: Mapping[str, int] | None = None
    answer_then_grid: int | None = None
    grid_anywhere: int | None = None
    ends_with_whitespace_rate: float | None = None
    score_mean: float | None = None
    downstream: DownstreamMetric | None = None
    # Rows a server read as an interval (an option outside its listed top-k; their mass is null),
    # and those whose interval holds the floor. Written only where there are any.
    mass_interval: int | None = None
    mass_undecided: int | None = None

    def as_json(self) -> dict[str, object]:
        out: dict[str, object] = {"n_items": self.n_items, "n_measured": self.n_measured, "n_skipped": self.n_skipped, "skip_reasons": list(self.skip_reasons)}
        if not self.n_measured:
            return out
        for f in fields(self)[len(out) :]:  # the measured numbers, after the four counts
            v = getattr(self, f.name)
            if f.name in INTERVAL_KEYS and not v:
                continue
            out[f.name] = v.as_json() if isinstance(v, DownstreamMetric) else dict(v) if isinstance(v, Mapping) else v
        return out

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> VariantSummary:
        known = {f.name for f in fields(cls)} - {"skip_reasons", "downstream"}  # those two are read below
        numbers = cls(**{k: v for k, v in d.items() if k in known})
        return replace(numbers, skip_reasons=tuple(d.get("skip_reasons") or ()), downstream=DownstreamMetric.from_json(d.get("downstream")))


@dataclass(frozen=True)
class CheckOutcome:
    """A check's verdict as summary.json records it (the evidence and example are in the reports)."""

    number: int
    name: str
    verdict: str
    reason: str

    def as_json(self) -> dict[str, object]:
        return {"number": self.number, "name": self.name, "verdict": self.verdict, "reason": self.reason}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> CheckOutcome:
        return cls(int(d["number"]), str(d["name"]), str(d["verdict"]), str(d["reason"]))


@dataclass(frozen=True)
class PTrueSection:
    """The ptrue preset's P(True) readouts: how the prompt was rendered, and ``readout ptrue``'s
    summary of the constructed setting (:func:`sleight.readout.ptrue.pipeline.summarise`), kept as
    that function writes it."""

    instruct: bool
    setting: Mapping[str, Any]

    def as_json(self) -> dict[str, object]:
        return {"instruct": self.instruct, **self.setting}

    @classmethod
    def from_json(cls, d: Mapping[str, Any] | None) -> PTrueSection | None:
        if not d:
            return None
        return cls(bool(d.get("instruct", True)), {k: v for k, v in d.items() if k != "instruct"})


@dataclass(frozen=True)
class AuditSummary:
    """summary.json of an audit: the floor, each variant's numbers (in the readings' order), the
    ptrue preset's section, and the checks' verdicts once they ran."""

    floor: float = MASS_FLOOR
    variants: Mapping[str, VariantSummary] = field(default_factory=dict)
    ptrue: PTrueSection | None = None
    checks: tuple[CheckOutcome, ...] = ()

    def variant(self, name: str) -> VariantSummary:
        """A variant's numbers; an empty record when the run has no such variant."""
        return self.variants.get(name) or VariantSummary()

    def as_json(self) -> dict[str, object]:
        out: dict[str, object] = {"floor": self.floor, "variants": {k: v.as_json() for k, v in self.variants.items()}}
        if self.ptrue is not None:
            out["ptrue"] = self.ptrue.as_json()
        if self.checks:
            out["checks"] = [c.as_json() for c in self.checks]
        return out

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> AuditSummary:
        return cls(
            floor=float(d.get("floor", MASS_FLOOR)),
            variants={k: VariantSummary.from_json(v or {}) for k, v in (d.get("variants") or {}).items()},
            ptrue=PTrueSection.from_json(d.get("ptrue")),
            checks=tuple(CheckOutcome.from_json(c) for c in d.get("checks") or ()),
        )
