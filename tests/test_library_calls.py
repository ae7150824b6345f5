"""Each readout instrument runs from Python exactly as from the shell: forecast, P(True) and the audit
called as library functions (no argparse) write the same rows as the commands, bit for bit; the
commands' defaults are the library's; the recorded dtype is the resolved one, so an explicit
``--dtype float32`` reruns a default run instead of being refused; the recorded command reproduces it."""

from __future__ import annotations

import json
import shlex

import pyarrow.parquet as pq
import pytest

from sleight.backends import DEFAULT_MODEL, load_model
from sleight.cli.common import model_spec_from_args
from sleight.cli.main import build_parser, main
from sleight.cli.readout_downstream import _config
from sleight.readout import downstream_run as dr
from sleight.readout.audit.run import load_audit, run_audit

pytestmark = pytest.mark.slow  # three instruments on the real model, each run twice

FORECAST = dr.ForecastConfig(limit=2, B=50, continuation_tokens=2, note_tokens=12, chunk=1)
PTRUE = dr.PTrueConfig(limit=1, B=50, continuation_tokens=2, max_new_tokens=6)


def _readings(path) -> list[dict]:
    return pq.read_table(path / "readings.parquet").to_pylist()


def _scores(summary: dict) -> dict:
    """summary.json without what names the folder or times the run."""
    return {k: v for k, v in summary.items() if k not in ("command", "seconds")}


def test_command_defaults_are_the_library_defaults():
    """The config a bare command builds is the library's default config, field for field (a model
    flag left unset is the spec's default, not a value the parser invents)."""
    parser = build_parser()
    for kind, config in (("forecast", dr.ForecastConfig()), ("ptrue", dr.PTrueConfig())):
        args = parser.parse_args(["readout", kind])
        assert _config(kind, args) == config, kind
        assert model_spec_from_args(args).batch_size == dr.DEFAULT_BATCH_SIZE


@pytest.mark.parametrize("config", [FORECAST, PTRUE], ids=["forecast", "ptrue"])
def test_downstream_from_python_equals_the_command(config, tmp_path):
    lib = dr.run_downstream(config, tmp_path / "lib", progress=False)
    cmd_out = tmp_path / "cmd"
    argv = shlex.split(config.command(cmd_out, lib.manifest["items"]))[1:]  # the recorded command, minus "sleight"
    assert "--dtype" in argv and "--chunk" in argv
    assert main([*argv, "--no-progress"]) == 0
    assert _readings(cmd_out) == _readings(tmp_path / "lib") == lib.rows
    cmd_summary = json.loads((cmd_out / "summary.json").read_text())
    assert _scores(cmd_summary) == _scores(json.loads((tmp_path / "lib" / "summary.json").read_text()))
    assert cmd_summary["command"] == " ".join(shlex.quote(a) for a in ["sleight", *argv])
    manifest = json.loads((cmd_out / "manifest.json").read_text())
    assert manifest["config"]["dtype"] == "float32" and manifest["config"]["chunk"] == config.chunk
    # an explicit --dtype float32 is the default run again: resumed (nothing to do), not refused
    default_argv = [a for i, a in enumerate(argv) if a != "--dtype" and (i == 0 or argv[i - 1] != "--dtype")]
    assert main([*default_argv, "--no-progress"]) == 0
    assert _readings(cmd_out) == lib.rows


def test_audit_from_python_equals_the_command(tmp_path):
    items, config, name = load_audit(preset="forecast", limit=1, variants="original,stem", max_new_tokens=3, rows_per_pass=16)
    lib = run_audit(load_model(DEFAULT_MODEL, batch_size=16), items, tmp_path / "lib", config, show_progress=False)
    argv = ["readout", "audit", "--preset", "forecast", "--limit", "1", "--variants", "original,stem", "--max-new-tokens", "3"]
    assert main([*argv, "--out", str(tmp_path / "cmd"), "--no-progress"]) == 0
    assert name == "forecast"
    assert _readings(tmp_path / "cmd") == _readings(lib.out_dir)
    assert json.loads((tmp_path / "cmd" / "summary.json").read_text()) == json.loads((lib.out_dir / "summary.json").read_text())
