"""The suite's own layout under ``make test`` (``-n 2 --dist loadgroup``): each module runs whole on
one worker, the engine modules together (tests/conftest.py), so a module's fixtures (a vLLM server,
a reproduced table) are built once and no two engines run side by side on the CPUs.

pytest-xdist 3.8.0 groups by a suffix it writes into each node id (``remote.py``
``pytest_collection_modifyitems``); pytest 9 keeps node ids where that write no longer lands, and
the suffix only carries a group the conftest has already marked, so both the pin (pytest 8.4) and
the conftest's ``tryfirst`` are what this test holds.
"""

from __future__ import annotations

import pytest

from conftest import ENGINE_MODULES


def test_each_module_runs_whole_on_one_worker(request: pytest.FixtureRequest) -> None:
    if not request.config.getvalue("loadgroup"):
        pytest.skip("not under pytest-xdist's --dist loadgroup (make test runs it so)")
    group = "engines" if request.path.name in ENGINE_MODULES else request.path.name
    assert request.node.nodeid.endswith(f"@{group}"), request.node.nodeid
