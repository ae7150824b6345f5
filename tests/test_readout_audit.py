"""The audit end to end on the real model: files, schema, checks, resume after a crash, CLI."""

from __future__ import annotations

import json

import pandas as pd
import pyarrow.parquet as pq
import pytest

from sleight.cli.main import main
from sleight.errors import UserError
from sleight.readout.audit.measure import SCHEMA
from sleight.readout.audit.presets import FORECAST_STEM, preset_items
from sleight.readout.audit.run import AuditConfig, run_audit

pytestmark = pytest.mark.slow  # audit runs with a crash and resume, the CLI

VARIANTS = ("original", "stem", "deleted_choices")
PUBLIC = [
    "item_id", "variant", "context_tail", "ends_with_whitespace", "boundary_preserved", "option_mass",
    "option_mass_isolated", "option_mass_divergent", "first_token_ids", "first_tokens_distinct", "argmax_id",
    "argmax_token", "argmax_prob", "argmax_class", "top_tokens", "option_logprobs", "score", "continuation",
    "continuation_class", "answer_then_grid", "grid_anywhere",
]


class Crashing:
    """The real model, killed (KeyboardInterrupt) on its n-th forward call; counts the calls."""

    def __init__(self, model, crash_at: int | None):
        self._m, self.crash_at, self.calls = model, crash_at, 0

    def __getattr__(self, name):
        return getattr(self._m, name)

    def _tick(self) -> None:
        self.calls += 1
        if self.crash_at is not None and self.calls >= self.crash_at:
            raise KeyboardInterrupt

    def continuation_logprobs(self, *args, **kwargs):
        self._tick()
        return self._m.continuation_logprobs(*args, **kwargs)

    def read_next(self, *args, **kwargs):
        self._tick()
        return self._m.read_next(*args, **kwargs)

    def read_scored(self, *args, **kwargs):
        self._tick()
        return self._m.read_scored(*args, **kwargs)

    def greedy(self, *args, **kwargs):
        self._tick()
        return self._m.greedy(*args, **kwargs)


@pytest.fixture(scope="module")
def audit_dir(model, tmp_path_factory):
    out = tmp_path_factory.mktemp("audit")
    items = preset_items("forecast", limit=2)
    config = AuditConfig(source="test", preset="forecast", stem=FORECAST_STEM, variants=VARIANTS, chunk_items=1, max_new_tokens=8)
    # Per item: one pass per context, reading its scored position and scoring the second digit of
    # the grid's two-digit options (hf reads and scores from one pass), then one greedy decode.
    per_item = len(VARIANTS) + 1
    crashing = Crashing(model, crash_at=per_item + 1)  # dies on the second item's first pass
    with pytest.raises(KeyboardInterrupt):
        run_audit(crashing, items, out, config, show_progress=False)
    assert len(list((out / "parts").glob("*.parquet"))) == 1  # the first item survived the crash
    resumed = Crashing(model, crash_at=None)
    result = run_audit(resumed, items, out, config, show_progress=False)
    assert resumed.calls == per_item  # only the second item was measured again
    return out, result


def test_outputs_and_public_schema(audit_dir):
    out, result = audit_dir
    for name in ("readings.parquet", "summary.json", "report.md", "report.html", "manifest.json"):
        assert (out / name).is_file(), name
    assert not (out / "parts").exists()
    table = pq.read_table(out / "readings.parquet")
    assert table.schema.equals(SCHEMA)
    assert set(PUBLIC) <= set(table.column_names)
    df = table.to_pandas()
    assert len(df) == 2 * len(VARIANTS) and not df.duplicated(["item_id", "variant"]).any()
    assert list(df["variant"][: len(VARIANTS)]) == list(VARIANTS)
    orig = df[df["variant"] == "original"]
    assert orig["context_tail"].str.len().max() <= 80 and orig["context_tail"].str.endswith("assistant\n").all()
    assert all(len(t) == 6 for t in orig["top_tokens"])
    assert all(len(lp) == 5 for lp in orig["option_logprobs"])
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["model"]["model_id"] and manifest["model"]["chat_template_sha256"]


def test_summary_and_report(audit_dir):
    out, result = audit_dir
    summary = json.loads((out / "summary.json").read_text())
    s = summary["variants"]["original"]
    for key in ("mass_median", "mass_min", "mass_below_floor", "answer_letter_rate", "option_argmax_rate", "distinct_rate", "continuation_classes"):
        assert key in s, key
    df = pd.read_parquet(out / "readings.parquet")
    orig = df[df["variant"] == "original"]
    assert s["mass_median"] == pytest.approx(float(orig["option_mass"].median()))
    assert s["mass_below_floor"] == int((orig["option_mass"] < 0.5).sum())
    assert s["answer_letter_rate"] == pytest.approx(float((orig["argmax_class"] == "answer_letter").mean()))
    assert sum(s["continuation_classes"].values()) == len(orig)
    assert [c["number"] for c in summary["checks"]] == [1, 2, 3, 4, 5, 6]
    assert all(c["verdict"] in ("pass", "warn", "fail", "skipped") for c in summary["checks"])
    md = (out / "report.md").read_text()
    for needle in ("## 1. Option mass", "## 6. Answer stem", "Worked example", "Top next tokens", "Options' mass", "Unrestricted continuation", "## Variants"):
        assert needle in md, needle
    html = (out / "report.html").read_text()
    assert html.startswith("<!doctype html>") and html.count("<section>") >= 7


def test_report_and_compare_commands(audit_dir, capsys):
    out, _ = audit_dir
    (out / "report.md").unlink()
    assert main(["readout", "report", str(out)]) == 0
    assert (out / "report.md").is_file()
    assert main(["readout", "compare", str(out), str(out), "--out", str(out / "cmp.md")]) == 0
    text = (out / "cmp.md").read_text()
    assert "| original |" in text and "median mass" in text and " / " in text


def test_a_different_audit_is_refused(model, audit_dir):
    out, _ = audit_dir
    items = preset_items("forecast", limit=1)
    with pytest.raises(UserError, match="different config"):
        run_audit(model, items, out, AuditConfig(variants=("original",)), show_progress=False)


def test_ptrue_preset_records_what_readout_ptrue_records(model, tmp_path):
    """``readout audit --preset ptrue`` and ``readout ptrue`` are one thing: the same rows."""
    from sleight.readout.ptrue.answers import load_qa_items
    from sleight.readout.ptrue.pipeline import run_ptrue
    from sleight.readout.ptrue.readouts import READOUT_NAMES

    items = preset_items("ptrue", limit=1)
    result = run_audit(model, items, tmp_path, AuditConfig(preset="ptrue", variants=("original",), max_new_tokens=4), show_progress=False)
    rows = pq.read_table(tmp_path / "ptrue.parquet").to_pylist()
    assert [r["readout"] for r in rows] == list(READOUT_NAMES) * 2
    from sleight.readout.ptrue.answers import DEFAULT_ITEMS

    qa = load_qa_items(DEFAULT_ITEMS, limit=1)
    want = run_ptrue(model, qa, settings=("constructed",), continuation_tokens=4)
    assert len(rows) == len(want)
    for got, exp in zip(rows, want):
        assert set(exp) <= set(got)  # ptrue.parquet has the schema of readout ptrue's readings
        for key, value in exp.items():
            assert got[key] == value, key  # the audit runs readout ptrue's own code on the same batch: bit-identical
    section = result.summary.ptrue
    assert section is not None and section.instruct is True and set(section.setting["readouts"]) == set(READOUT_NAMES)
    md = (tmp_path / "report.md").read_text()
    assert "P(True) readouts" in md and "Labels in place" in md and "stem None" not in md


def test_cli_audit_end_to_end(tmp_path, capsys):
    out = tmp_path / "cli"
    code = main(["readout", "audit", "--preset", "forecast", "--limit", "1", "--variants", "original,stem", "--max-new-tokens", "4", "--out", str(out), "--no-progress"])
    assert code == 0
    printed = capsys.readouterr().out
    assert "median option mass: original" in printed and "report_html" in printed
    df = pd.read_parquet(out / "readings.parquet")
    assert list(df["variant"]) == ["original", "stem"]
    assert df.loc[1, "context"].endswith(FORECAST_STEM)
