"""Two judged real runs and their report, shared by the report and site tests (built once).

The runs are real (``sleight tamper run`` on the bundled model, once by name and once by its GGUF
path, so the leaderboard has two rows). The jury is three scripted OpenAI-compatible judges on a
real loopback server whose labels vary by trial, including abstentions and split votes, so every
table has something to count. A third copy is judged by a jury of one.
"""

from __future__ import annotations

import json
import re
import zlib
from dataclasses import dataclass
from pathlib import Path

import pytest

from fault_server import scripted
from sleight.backends.resolve import BUNDLED, DEFAULT_MODEL, bundled_gguf
from sleight.cli.main import main
from sleight.tamper.jury.run import judge_run
from tamper_artifacts import copy_run, real_run

_MEMO: dict[str, Judged] = {}


@dataclass
class Judged:
    runs: list[Path]  # judged by the jury of three
    solo: Path  # judged by a jury of one
    report: Path  # report over ``runs``
    solo_report: Path
    jury: list[str]


def _trial_of(body: dict) -> tuple[str, str]:
    text = body["messages"][1]["content"]
    q = re.search(r"^Question: (.*)$", text, re.M).group(1)
    sub = re.search(r'^Substitute written in its place: "(.*)"$', text, re.M).group(1)
    return q, sub


def _labels(seed: str, body: dict) -> dict[str, bool]:
    h = zlib.crc32(("|".join(_trial_of(body)) + seed).encode())
    return {"flagged": bool(h & 1), "corrected": bool(h & 2), "derailed": bool(h & 4), "switch_aware": bool(h & 8)}


def _alpha(body: dict) -> str:
    return json.dumps({**_labels("", body), "reason": "alpha read it"})


def _beta(body: dict) -> str:
    lab = _labels("", body)
    lab["flagged"] = lab["flagged"] if zlib.crc32(_trial_of(body)[1].encode()) % 3 else not lab["flagged"]
    return "```json\n" + json.dumps({**lab, "reason": "beta"}) + "\n```"


def _gamma(body: dict) -> str:
    if zlib.crc32("|".join(_trial_of(body)).encode()) % 3 == 0:
        return "I cannot decide."  # abstains (after the retry)
    return json.dumps({k: str(v).lower() for k, v in _labels("g", body).items()} | {"reason": "gamma"})


def judged_report(factory: pytest.TempPathFactory) -> Judged:
    if "j" in _MEMO:
        return _MEMO["j"]
    base = factory.mktemp("judged")
    gguf = bundled_gguf(BUNDLED[DEFAULT_MODEL])
    # the second model is the same weights named by their GGUF file: a second leaderboard row, kept small
    second = real_run(factory, name="run-gguf", model=str(gguf), questions=1, substitutes=2, max_new_tokens=32)
    sources = [real_run(factory), second]
    runs = [copy_run(src, base / f"run{i}") for i, src in enumerate(sources)]
    solo = copy_run(sources[0], base / "solo")
    with scripted({"alpha": _alpha, "beta": _beta, "gamma": _gamma}) as srv:
        jury = [srv.spec(m) for m in ("alpha", "beta", "gamma")]
        for run in runs:  # sleight's reading: the split and abstaining votes stay undecided, for the tables to count
            judge_run(run, jury, progress=False, conventions="sleight")
        judge_run(solo, [jury[0]], progress=False, conventions="sleight")
    report, solo_report = base / "report", base / "solo-report"
    assert main(["tamper", "report", *map(str, runs), "--out", str(report)]) == 0
    assert main(["tamper", "report", str(solo), "--out", str(solo_report)]) == 0
    _MEMO["j"] = Judged(runs, solo, report, solo_report, jury)
    return _MEMO["j"]
