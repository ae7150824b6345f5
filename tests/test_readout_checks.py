"""Check 6's downstream change and the report header, on hand-built readings (no model)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from sleight.readout.audit.checks import CHANGE_B, CHANGE_MIN_ITEMS, downstream_change, run_checks
from sleight.readout.audit.report import stem_text
from sleight.readout.audit.summary import AuditSummary, VariantSummary
from sleight.stats import auroc, paired_bootstrap


def readings(n: int, seed: int = 0) -> pd.DataFrame:
    """``n`` items at the original and the stem position: the stem's score ranks the target worse."""
    rng = np.random.default_rng(seed)
    y = np.array([k % 2 for k in range(n)], dtype=float)
    rows = []
    for v, noise in (("original", 0.2), ("stem", 0.9)):
        s = y * 0.5 + rng.uniform(0, 1, n) * noise
        for k in range(n):
            rows.append(
                {
                    "item_id": f"i{k}", "variant": v, "skipped": False, "skip_reason": None, "score": float(s[k]), "target": y[k],
                    "option_mass": 0.9, "option_mass_isolated": 0.9, "option_mass_divergent": 0.9, "boundary_preserved": True,
                    "argmax_class": "option", "first_tokens_distinct": True, "continuation_on_task": True, "continuation_class": "forecast",
                    "answer_then_grid": False, "grid_anywhere": True, "ends_with_whitespace": True, "options": ["10", "90"],
                    "option_first_probs": [0.5, 0.4], "first_token_ids": [1, 2], "top_tokens": [], "context_tail": "x", "argmax_token": "1",
                    "continuation": "10",
                }
            )
    return pd.DataFrame(rows)


def test_too_few_items_get_no_interval_and_no_drop():
    df = readings(6)
    c = downstream_change(df)
    assert c.n == 6 and c.too_few and c.low is None
    check = run_checks(df)[5]
    assert "too few items for an interval" in check.reason and "on 6 items" in check.reason
    assert check.evidence["downstream_change"] == c


def test_the_change_carries_its_paired_bootstrap_interval():
    df = readings(2 * CHANGE_MIN_ITEMS, seed=5)
    c = downstream_change(df)
    o, s = (df[df["variant"] == v] for v in ("original", "stem"))
    y = o["target"].to_numpy()
    pb = paired_bootstrap(auroc, (s["score"].to_numpy(), y), (o["score"].to_numpy(), y), B=CHANGE_B, seed=0)
    assert not c.too_few and c.metric == "auroc"
    assert (c.diff, c.low, c.high) == pytest.approx((pb.diff, pb.ci_diff.low, pb.ci_diff.high))
    assert c.diff < -0.05  # a drop: the verdict warns and the reason gives the interval
    check = run_checks(df)[5]
    assert check.verdict == "warn" and "paired bootstrap interval" in check.reason and f"{c.low:+.3f}" in check.reason


def test_header_names_the_stem_never_none():
    assert stem_text({"stem": "So "}, AuditSummary()) == "answer stem 'So '"
    assert stem_text({"stem": None, "variants": ["original", "stem"]}, AuditSummary(variants={"stem": VariantSummary(n_measured=3)})) == "answer stems per item"
    assert stem_text({"stem": None, "variants": ["original", "stem"]}, AuditSummary(variants={"stem": VariantSummary(n_measured=0)})).startswith("no answer stem (")
    assert stem_text({"stem": None, "variants": ["original"]}, AuditSummary(variants={"original": VariantSummary()})) == "no answer stem"
