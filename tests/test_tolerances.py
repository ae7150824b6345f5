"""Numeric tolerances in the tests are named (tests/tolerances.py), never bare literals: a tolerance
tuned by hand on one CPU's kernels is a test that fails on another's (docs/development.md)."""

from __future__ import annotations

import re
from pathlib import Path

import tolerances

TESTS = Path(__file__).parent
# a keyword tolerance given as a number, or a float compared against a bare small literal
BARE = re.compile(r"\b(?:atol|rtol|abs|rel|tol)\s*=\s*[0-9][0-9.eE+-]*\b|[<>]=?\s*[0-9.]+e-[0-9]+\b")


def test_no_test_compares_floats_with_a_bare_literal_tolerance():
    found = []
    for path in sorted(TESTS.glob("*.py")):
        if path.name in ("tolerances.py", Path(__file__).name):
            continue
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            code = line.split("#", 1)[0]
            if BARE.search(code):
                found.append(f"{path.name}:{n}: {line.strip()}")
    assert not found, "bare tolerance literals (use tests/tolerances.py):\n" + "\n".join(found)


def test_the_named_tolerances_are_ordered_as_measured():
    # the measured noise (benchmarks/noise.py): log-prob > entropy > mass, each with headroom below its bound
    assert tolerances.MASS_ATOL < tolerances.LOGPROB_ATOL and tolerances.ENTROPY_ATOL <= tolerances.LOGPROB_ATOL
    assert tolerances.LOGPROB_ATOL <= 1e-4  # the bar the issues hold every engine comparison to
