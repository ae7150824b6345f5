"""Bad inputs and faults, one table (SPEC §7, issue #11 B): each row is a real ``sleight`` command
line run in a subprocess against real files (and, where a row needs one, a real loopback server or
a real run directory), and must end with the exit code it names, one line on stderr naming the
input, and never a traceback.

Rows that need no model must not load one: their checks come before any model is loaded, and many
rows pass ``--model no-such-model`` as well, so that if the model were resolved first, *that* error
would win and the row would fail. Rows that load the model (``slow=True``) or need a real run
directory (``run=True``, built once) are marked slow; the fast tier (``-m "not slow"``) stays fast.

Placeholders in a row's argv: ``{tmp}`` (a fresh folder holding the row's ``files``), ``{port}`` (a
loopback port nobody listens on, or the one a ``busy`` server holds), ``{url}`` (the base URL of the
row's ``server``), ``{run}`` (a private copy of a small real run). Other helpers append their rows
to the lists marked below; the test picks them up.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pytest

NO_MODEL = ("--model", "no-such-model")  # would win if the model were resolved before the row's check


@dataclass(frozen=True)
class Fault:
    id: str
    argv: tuple[str, ...]
    needle: str  # in the one stderr line (rc != 0) or in stdout (rc == 0); placeholders allowed
    rc: int = 2
    files: Mapping[str, str | bytes] = field(default_factory=dict)  # written under {tmp} first
    server: str | None = None  # a key of SERVERS; gives {url} (and {port})
    run: bool = False  # {run}: a copy of a small real run (slow: built once per session)
    slow: bool = False  # loads the model
    absent: tuple[str, ...] = ()  # paths that must not exist afterwards (nothing was written)
    one_line: bool = True  # stderr is exactly one line (rc != 0)
    progress_lines: int | None = None  # stderr is no terminal here: exactly this many plain "tamper: " lines


QUESTION = '{"id": "a", "question": "What is the capital of France?"}\n'
GOOD_ITEM = '{"id": "a", "prompt": "Pick one. Say A or B.", "options": ["A", "B"]}\n'
RACE_ITEM = '{"id": "r1", "passage": "p", "question": "q", "choices": ["a","b","c","d"], "answer": "A"}\n'
LM_EVAL_FUNCTION = "task: t\ndataset_path: json\noutput_type: multiple_choice\ndoc_to_text: !function utils.doc_to_text\n"
LM_EVAL_GENERATE = "task: t\ndataset_path: json\noutput_type: generate_until\ndoc_to_text: q\ndoc_to_target: 0\ndoc_to_choice: [a, b]\n"

# ---------------------------------------------------------------------------------------- the table

CLI = [
    Fault("unknown-command", ("nope",), "invalid choice: 'nope'"),
    Fault("unknown-flag", ("tamper", "run", "--nope"), "unrecognized arguments: --nope"),
    Fault("flag-not-a-number", ("tamper", "run", "--max-new-tokens", "lots"), "--max-new-tokens: invalid int value: 'lots'"),
    Fault("required-flag-missing", ("tamper", "judge"), "the following arguments are required: --run"),
    Fault("bad-choice", ("generate", "--engine", "nope"), "argument --engine: invalid choice: 'nope'"),
]

MODELS = [
    Fault("unknown-model", ("generate", "--model", "no-such-model"), "unknown model 'no-such-model'"),
    Fault("missing-gguf", ("generate", "--model", "/nowhere/model.gguf"), "model file not found: /nowhere/model.gguf"),
    Fault("missing-model-folder", ("generate", "--model", "./missing-folder/"), "model path not found: ./missing-folder/"),
    Fault("folder-without-config", ("generate", "--model", "{tmp}/m"), "has no config.json", files={"m/README.md": "not a model"}),
    Fault("hub-offline", ("generate", "--model", "someorg/some-model"), "'someorg/some-model' is not in the local Hugging Face cache"),
    Fault("endpoint-down", ("generate", "--model", "openai:http://127.0.0.1:{port}/v1#judge"), "endpoint http://127.0.0.1:{port}/v1 is not reachable", server="down"),
    Fault("endpoint-spec-without-url", ("generate", "--model", "openai:localhost#x"), "bad endpoint spec"),
    Fault("endpoint-spec-without-model", ("generate", "--model", "openai:http://127.0.0.1:9/v1#"), "the model name after '#' is empty"),
    Fault("generate-zero-budget", ("generate", "--max-new-tokens", "0", *NO_MODEL), "--max-new-tokens must be at least 1"),
]

TAMPER_RUN = [
    Fault("questions-file-missing", ("tamper", "run", "--questions-file", "{tmp}/none.jsonl", "--out", "{tmp}/o", *NO_MODEL), "file not found: {tmp}/none.jsonl", absent=("o",)),
    Fault("questions-json-line-2", ("tamper", "run", "--questions-file", "{tmp}/q.jsonl", "--out", "{tmp}/o", *NO_MODEL),
          "q.jsonl, line 2, column 25: not valid JSON (Expecting value)", files={"q.jsonl": QUESTION + '{"id": "b", "question": \n'}, absent=("o",)),
    Fault("questions-not-utf8", ("tamper", "run", "--questions-file", "{tmp}/q.jsonl", *NO_MODEL), "is not UTF-8 text", files={"q.jsonl": b'{"question": "caf\xe9?"}\n'}),
    Fault("questions-empty", ("tamper", "run", "--questions-file", "{tmp}/q.jsonl", *NO_MODEL), "holds no questions", files={"q.jsonl": "\n\n"}),
    Fault("question-field-missing", ("tamper", "run", "--questions-file", "{tmp}/q.jsonl", *NO_MODEL), 'line 1: expected an object with a non-empty "question" string',
          files={"q.jsonl": '{"id": "a", "text": "hi"}\n'}),
    Fault("question-id-duplicate", ("tamper", "run", "--questions-file", "{tmp}/q.jsonl", *NO_MODEL), "line 2: duplicate question id 'a' (first on line 1)",
          files={"q.jsonl": QUESTION * 2}),
    Fault("auto-id-then-explicit", ("tamper", "run", "--questions-file", "{tmp}/q.jsonl", *NO_MODEL),
          "line 3: question id 'q001' is already the automatic id of line 1, which has no \"id\"",
          files={"q.jsonl": '{"question": "One?"}\n\n{"id": "q001", "question": "Two?"}\n'}),
    Fault("explicit-then-auto-id", ("tamper", "run", "--questions-file", "{tmp}/q.jsonl", *NO_MODEL),
          "line 2: this question has no \"id\", so it is numbered 'q002' by its position, but line 1 gives that id explicitly",
          files={"q.jsonl": '{"id": "q002", "question": "One?"}\n{"question": "Two?"}\n'}),
    Fault("substitute-duplicate", ("tamper", "run", "--substitutes-file", "{tmp}/s.txt", *NO_MODEL), "line 3: duplicate substitute 'canoe'", files={"s.txt": "# c\ncanoe\ncanoe\n"}),
    Fault("substitutes-empty", ("tamper", "run", "--substitutes-file", "{tmp}/s.txt", *NO_MODEL), "holds no substitutes", files={"s.txt": "# only a comment\n"}),
    Fault("questions-zero", ("tamper", "run", "--questions", "0", *NO_MODEL), "--questions must be at least 1"),
    Fault("substitutes-zero", ("tamper", "run", "--substitutes", "0", *NO_MODEL), "--substitutes must be at least 1"),
    Fault("trigger-two-words", ("tamper", "run", "--trigger", "two words", *NO_MODEL), "--trigger: trigger word 'two words' must be a single word"),
    Fault("trigger-no-letter", ("tamper", "run", "--trigger", "123", *NO_MODEL), "at least one letter"),
    Fault("tamper-zero-budget", ("tamper", "run", "--max-new-tokens", "0", *NO_MODEL), "--max-new-tokens must be at least 1 (got 0)"),
    Fault("tamper-out-proc", ("tamper", "run", "--out", "/proc/sleight-run", *NO_MODEL), "--out /proc/sleight-run cannot be written"),
    Fault("tamper-out-under-file", ("tamper", "run", "--out", "{tmp}/f/run", *NO_MODEL), "--out {tmp}/f/run: {tmp}/f is a file", files={"f": "x"}),
    Fault("tamper-out-is-file", ("tamper", "run", "--out", "{tmp}/f", *NO_MODEL), "--out {tmp}/f exists and is not a folder", files={"f": "x"}),
    Fault("tamper-out-foreign-folder", ("tamper", "run", "--out", "{tmp}/o", *NO_MODEL), "is not empty and holds no manifest.json", files={"o/notes.txt": "mine"}),
    Fault("tamper-out-bad-manifest", ("tamper", "run", "--out", "{tmp}/o", *NO_MODEL), "manifest.json", files={"o/manifest.json": "{oops"}),
]

TAMPER_OTHER = [
    Fault("judge-run-missing", ("tamper", "judge", "--run", "{tmp}/none", "--jury", "no-such-model"), "{tmp}/none"),
    Fault("judge-budget-too-small", ("tamper", "judge", "--run", "{tmp}/none", "--jury", "x", "--max-new-tokens", "8"), "--max-new-tokens 8 is too small"),
    Fault("report-runs-missing", ("tamper", "report", "{tmp}/none", "{tmp}/also-none", "--out", "{tmp}/r"), "{tmp}/none", absent=("r",)),
    Fault("report-not-a-run", ("tamper", "report", "{tmp}/e", "--out", "{tmp}/r"), "manifest.json", files={"e/x.txt": ""}),
    Fault("report-out-under-file", ("tamper", "report", "{tmp}/e", "--out", "{tmp}/f/r"), "{tmp}/f is a file", files={"f": "x", "e/x.txt": ""}),
    Fault("report-out-proc", ("tamper", "report", "{tmp}/e", "--out", "/proc/sleight-report"), "--out /proc/sleight-report cannot be written", files={"e/x.txt": ""}),
    Fault("view-no-report", ("tamper", "view", "{tmp}"), "has no index.html"),
    Fault("view-port-busy", ("tamper", "view", "{tmp}/r", "--port", "{port}"), "cannot listen on 127.0.0.1:{port}", files={"r/index.html": "<p>hi</p>"}, server="busy"),
]

READOUT = [
    Fault("audit-no-source", ("readout", "audit", *NO_MODEL), "give exactly one of --items FILE or --preset NAME"),
    Fault("audit-items-missing", ("readout", "audit", "--items", "{tmp}/none.jsonl", *NO_MODEL), "items file not found"),
    Fault("audit-items-empty", ("readout", "audit", "--items", "{tmp}/i.jsonl", *NO_MODEL), "items file is empty", files={"i.jsonl": "\n"}),
    Fault("audit-json-line-2", ("readout", "audit", "--items", "{tmp}/i.jsonl", "--out", "{tmp}/o", *NO_MODEL), "i.jsonl line 2: not valid JSON",
          files={"i.jsonl": GOOD_ITEM + "{not json}\n"}, absent=("o",)),
    Fault("audit-items-not-utf8", ("readout", "audit", "--items", "{tmp}/i.jsonl", *NO_MODEL), "UTF-8", files={"i.jsonl": b'{"id": "a", "prompt": "caf\xe9", "options": ["A"]}\n'}),
    Fault("audit-options-empty", ("readout", "audit", "--items", "{tmp}/i.jsonl", "--options", "", *NO_MODEL), "--options is empty", files={"i.jsonl": GOOD_ITEM}),
    Fault("audit-options-repeated", ("readout", "audit", "--items", "{tmp}/i.jsonl", "--options", "A,A", *NO_MODEL), "options are not distinct strings", files={"i.jsonl": GOOD_ITEM}),
    Fault("audit-options-bad-json", ("readout", "audit", "--items", "{tmp}/i.jsonl", "--options", "[oops", *NO_MODEL), "--options is not a valid JSON list", files={"i.jsonl": GOOD_ITEM}),
    Fault("audit-item-option-empty", ("readout", "audit", "--items", "{tmp}/i.jsonl", *NO_MODEL), "i.jsonl line 1: options must be a non-empty list",
          files={"i.jsonl": '{"id": "b", "prompt": "x", "options": []}\n'}),
    Fault("audit-no-options", ("readout", "audit", "--items", "{tmp}/i.jsonl", *NO_MODEL), "item 'b' has no options", files={"i.jsonl": '{"id": "b", "prompt": "x"}\n'}),
    Fault("audit-duplicate-id", ("readout", "audit", "--items", "{tmp}/i.jsonl", *NO_MODEL), "i.jsonl line 2: duplicate id 'a'", files={"i.jsonl": GOOD_ITEM * 2}),
    Fault("audit-missing-id", ("readout", "audit", "--items", "{tmp}/i.jsonl", *NO_MODEL), "missing 'id'", files={"i.jsonl": '{"prompt": "x", "options": ["A"]}\n'}),
    Fault("audit-no-prompt", ("readout", "audit", "--items", "{tmp}/i.jsonl", *NO_MODEL), "needs 'messages' (a chat) or 'prompt'", files={"i.jsonl": '{"id": "a", "options": ["A"]}\n'}),
    Fault("audit-quoted-part-absent", ("readout", "audit", "--items", "{tmp}/i.jsonl", *NO_MODEL), "'quoted_instruction' does not occur in the prompt text",
          files={"i.jsonl": '{"id": "a", "prompt": "x", "options": ["A"], "quoted_instruction": "nope"}\n'}),
    Fault("audit-csv-bad-number", ("readout", "audit", "--items", "{tmp}/b.csv", *NO_MODEL), "b.csv row 2: column 'target' must be a number",
          files={"b.csv": "id,prompt,options,target\nq1,x,\"A,B\",notanumber\n"}),
    Fault("audit-yaml-function", ("readout", "audit", "--items", "{tmp}/t.yaml", *NO_MODEL), "!function", files={"t.yaml": LM_EVAL_FUNCTION}),
    Fault("audit-yaml-not-multiple-choice", ("readout", "audit", "--items", "{tmp}/t.yaml", *NO_MODEL), "only multiple_choice", files={"t.yaml": LM_EVAL_GENERATE}),
    Fault("audit-unknown-variant", ("readout", "audit", "--items", "{tmp}/i.jsonl", "--variants", "original,nope", *NO_MODEL), "unknown variant(s) nope", files={"i.jsonl": GOOD_ITEM}),
    Fault("audit-floor-zero", ("readout", "audit", "--items", "{tmp}/i.jsonl", "--floor", "0", *NO_MODEL), "--floor must be in (0, 1]", files={"i.jsonl": GOOD_ITEM}),
    Fault("audit-zero-budget", ("readout", "audit", "--items", "{tmp}/i.jsonl", "--max-new-tokens", "0", *NO_MODEL), "--max-new-tokens must be at least 1", files={"i.jsonl": GOOD_ITEM}),
    Fault("audit-limit-zero", ("readout", "audit", "--items", "{tmp}/i.jsonl", "--limit", "0", *NO_MODEL), "--limit", files={"i.jsonl": GOOD_ITEM}),
    Fault("audit-unknown-data", ("readout", "audit", "--preset", "forecast", "--data", "hf:nope", *NO_MODEL), "unknown data source 'hf:nope'"),
    Fault("audit-out-proc", ("readout", "audit", "--items", "{tmp}/i.jsonl", "--out", "/proc/sleight-audit", *NO_MODEL), "--out /proc/sleight-audit cannot be written",
          files={"i.jsonl": GOOD_ITEM}),
    Fault("audit-out-under-file", ("readout", "audit", "--items", "{tmp}/i.jsonl", "--out", "{tmp}/f/o", *NO_MODEL), "{tmp}/f is a file", files={"i.jsonl": GOOD_ITEM, "f": "x"}),
    Fault("compare-not-audits", ("readout", "compare", "{tmp}/a", "{tmp}/b"), "is not an audit directory (no summary.json)"),
    Fault("compare-out-under-file", ("readout", "compare", "{tmp}/a", "{tmp}/b", "--out", "{tmp}/f/c.md"), "{tmp}/f is a file", files={"f": "x"}),
    Fault("readout-report-missing", ("readout", "report", "{tmp}/none"), "audit directory not found"),
    Fault("ptrue-bad-item", ("readout", "ptrue", "--items", "{tmp}/q.jsonl", "--out", "{tmp}/o", *NO_MODEL), "q.jsonl line 1: needs 'answers'",
          files={"q.jsonl": '{"id": "q1", "question": "Why?"}\n'}, absent=("o",)),
    Fault("ptrue-zero-replicates", ("readout", "ptrue", "--B", "0", *NO_MODEL), "--B must be a positive number of replicates"),
    Fault("ptrue-zero-budget", ("readout", "ptrue", "--max-new-tokens", "0", *NO_MODEL), "--max-new-tokens must be at least 1"),
    Fault("ptrue-limit-zero", ("readout", "ptrue", "--limit", "0", *NO_MODEL), "--limit must be at least 1"),
    Fault("forecast-items-missing", ("readout", "forecast", "--items", "{tmp}/none.jsonl", "--out", "{tmp}/o", *NO_MODEL), "items file not found", absent=("o",)),
    Fault("forecast-bad-answer", ("readout", "forecast", "--items", "{tmp}/r.jsonl", *NO_MODEL), "line 2: 'answer' must be one of A, B, C, D",
          files={"r.jsonl": RACE_ITEM + RACE_ITEM.replace('"r1"', '"r2"').replace('"A"}', '"E"}')}),
    Fault("forecast-zero-continuation", ("readout", "forecast", "--continuation-tokens", "0", *NO_MODEL), "--continuation-tokens must be at least 1"),
    Fault("forecast-rescore-nothing", ("readout", "forecast", "--rescore", "--out", "{tmp}/o"), "--rescore needs"),
    Fault("forecast-out-under-file", ("readout", "forecast", "--items", "{tmp}/r.jsonl", "--out", "{tmp}/f/o", *NO_MODEL), "{tmp}/f is a file",
          files={"r.jsonl": RACE_ITEM, "f": "x"}),
]

DEMO = [
    Fault("demo-out-proc", ("demo", "--out", "/proc/sleight-demo"), "--out /proc/sleight-demo cannot be written"),
    Fault("demo-zero-questions", ("demo", "--questions", "0", "--out", "{tmp}/d"), "--questions must be at least 1", absent=("d",)),
]

# Faults that need the model or a real run (the slow tier).
SLOW = [
    Fault("trigger-never-fires-accent", ("tamper", "run", "--questions", "2", "--substitutes", "2", "--max-new-tokens", "8", "--trigger", "été", "--out", "{tmp}/run"),
          "the trigger 'été' never fired", rc=0, slow=True, progress_lines=2),
    Fault("trigger-never-fires-punct", ("tamper", "run", "--questions", "2", "--substitutes", "2", "--max-new-tokens", "8", "--trigger", "The.", "--out", "{tmp}/run"),
          "the trigger 'The.' never fired", rc=0, slow=True),
    Fault("judge-endpoint-down", ("tamper", "judge", "--run", "{run}", "--jury", "openai:http://127.0.0.1:{port}/v1#judge"), "127.0.0.1:{port}/v1 is not reachable",
          server="down", run=True),
    Fault("tamper-run-other-config", ("tamper", "run", "--out", "{run}", "--trigger", "a", "--questions", "2", "--substitutes", "3", "--max-new-tokens", "48"),
          "different config", run=True),
]

# ---- rows of the run-directory helper (truncated or empty Parquet parts, ...) go here ----------
_MANIFEST = '{"format": "sleight-run", "version": 1, "kind": "tamper", "config": {"substitutes": {"n": 3}}, "units": 2}'
_FORECAST_MANIFEST = '{"format": "sleight-run", "version": 1, "kind": "forecast", "config": {}, "units": 1}'
RUN_DIRECTORY: list[Fault] = [
    Fault("report-truncated-part", ("tamper", "report", "{tmp}/r", "--out", "{tmp}/rep"), "r/trials.parquet/00000-q001.parquet is damaged (unreadable",
          files={"r/manifest.json": _MANIFEST, "r/trials.parquet/00000-q001.parquet": b"PAR1\x15\x04\x15\x30\x15"}),
    Fault("report-empty-part", ("tamper", "report", "{tmp}/r", "--out", "{tmp}/rep"), "r/trials.parquet/00000-q001.parquet is damaged (empty file)",
          files={"r/manifest.json": _MANIFEST, "r/trials.parquet/00000-q001.parquet": b""}),
    Fault("judge-truncated-part", ("tamper", "judge", "--run", "{tmp}/r", "--jury", "openai:http://127.0.0.1:9/v1#j"), "is damaged (unreadable",
          files={"r/manifest.json": _MANIFEST, "r/trials.parquet/00000-q001.parquet": b"PAR1PAR1"}),
    Fault("manifest-not-json", ("tamper", "report", "{tmp}/r", "--out", "{tmp}/rep"), "r/manifest.json is not valid JSON",
          files={"r/manifest.json": '{"format": "sleight-run", '}),
    Fault("manifest-newer-format", ("tamper", "report", "{tmp}/r", "--out", "{tmp}/rep"), "is format version 99",
          files={"r/manifest.json": '{"format": "sleight-run", "version": 99, "kind": "tamper"}'}),
    Fault("rescore-damaged-readings", ("readout", "forecast", "--out", "{tmp}/f", "--rescore", *NO_MODEL), "f/readings.parquet is damaged (empty file)",
          files={"f/manifest.json": _FORECAST_MANIFEST, "f/readings.parquet": b""}),
    Fault("rescore-other-kind", ("readout", "ptrue", "--out", "{tmp}/f", "--rescore", *NO_MODEL), "holds a 'forecast' run, not 'ptrue'",
          files={"f/manifest.json": _FORECAST_MANIFEST}),
    Fault("judge-not-a-run", ("tamper", "judge", "--run", "{tmp}/e", "--jury", "openai:http://127.0.0.1:9/v1#j"), "is neither a tamper run directory nor a folder of them",
          files={"e/notes.txt": "x"}),
    Fault("report-run-missing", ("tamper", "report", "{tmp}/nowhere", "--out", "{tmp}/rep"), "run directory {tmp}/nowhere does not exist"),
    Fault("out-not-a-run", ("tamper", "run", "--out", "{tmp}/o", "--questions", "1", *NO_MODEL), "is not empty and holds no manifest.json", files={"o/mine.txt": "x"}),
    Fault("shard-not-k-of-n", ("tamper", "run", "--shard", "two", "--out", "{tmp}/o", *NO_MODEL), "--shard must be K/N", absent=("o",)),
    Fault("shard-k-too-large", ("tamper", "run", "--shard", "3/2", "--out", "{tmp}/o", *NO_MODEL), "--shard 3/2: need 1 <= K <= N", absent=("o",)),
    Fault("sweep-zero-shards", ("tamper", "sweep", "--models", "a,b", "--shards", "0", "--out", "{tmp}/s"), "--shards must be at least 1", absent=("s",)),
    Fault("sweep-same-name-twice", ("tamper", "sweep", "--models", "m,m", "--out", "{tmp}/s"), "would both write", absent=("s",)),
    Fault("sweep-ray-and-no-ray", ("tamper", "sweep", "--models", "m", "--ray", "auto", "--no-ray", "--out", "{tmp}/s"), "give --ray ADDRESS or --no-ray, not both"),
    Fault("sweep-bad-questions", ("tamper", "sweep", "--models", "m", "--questions-file", "{tmp}/none.jsonl", "--no-ray", "--out", "{tmp}/s"), "file not found: {tmp}/none.jsonl"),
    Fault("shard-other-config", ("tamper", "run", "--out", "{run}", "--shard", "2/2", "--trigger", "a", "--questions", "2", "--substitutes", "3", "--max-new-tokens", "48"),
          "different config (trigger: 'the' there, 'a' here)", run=True),
]

# ---- rows of the jury helper (judge transport faults, no vote cast, ...) go here ---------------
JURY: list[Fault] = []

TABLE = [*CLI, *MODELS, *TAMPER_RUN, *TAMPER_OTHER, *READOUT, *DEMO, *SLOW, *RUN_DIRECTORY, *JURY]


# ---------------------------------------------------------------------------------------- servers


@contextlib.contextmanager
def _down() -> Iterator[dict[str, str]]:
    """A loopback port nobody listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    yield {"port": str(port), "url": f"http://127.0.0.1:{port}/v1"}


@contextlib.contextmanager
def _busy() -> Iterator[dict[str, str]]:
    """A loopback port held by a listening socket for the row's whole call."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        yield {"port": str(port), "url": f"http://127.0.0.1:{port}/v1"}


# name -> context manager yielding placeholder values; other helpers may add theirs.
SERVERS: dict[str, Callable[[], contextlib.AbstractContextManager[dict[str, str]]]] = {"down": _down, "busy": _busy}


# ---------------------------------------------------------------------------------------- the test


def _marks(f: Fault) -> list:
    return [pytest.mark.slow] if (f.slow or f.run) else []


@pytest.fixture(scope="session")
def small_run(tmp_path_factory) -> Path:
    from tamper_artifacts import real_run

    return real_run(tmp_path_factory)


def _write_files(tmp: Path, files: Mapping[str, str | bytes]) -> None:
    for rel, content in files.items():
        p = tmp / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            p.write_bytes(content)
        else:
            p.write_text(content, encoding="utf-8")


def _sleight(argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "OMP_WAIT_POLICY": "PASSIVE"}
    return subprocess.run([sys.executable, "-m", "sleight.cli.main", *argv], capture_output=True, text=True, env=env, cwd=cwd, timeout=600)


def test_table_ids_are_unique():
    ids = [f.id for f in TABLE]
    assert len(ids) == len(set(ids)), sorted(i for i in ids if ids.count(i) > 1)


@pytest.mark.parametrize("fault", [pytest.param(f, id=f.id, marks=_marks(f)) for f in TABLE])
def test_fault(fault: Fault, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    tmp = tmp_path / "w"
    tmp.mkdir()
    _write_files(tmp, fault.files)
    values = {"tmp": str(tmp)}
    if fault.run:
        run = tmp / "run-copy"
        shutil.copytree(request.getfixturevalue("small_run"), run, ignore=shutil.ignore_patterns("judgements.parquet", "verdicts.parquet", "jury.json"))
        values["run"] = str(run)
    server = SERVERS[fault.server]() if fault.server else contextlib.nullcontext({})
    with server as extra:
        values.update(extra)
        argv = [a.format(**values) for a in fault.argv]
        proc = _sleight(argv, cwd=tmp)
    needle = fault.needle.format(**values)
    shown = f"$ sleight {' '.join(argv)}\n--- rc {proc.returncode}\n--- stdout\n{proc.stdout[-3000:]}\n--- stderr\n{proc.stderr[-3000:]}"
    assert "Traceback" not in proc.stderr + proc.stdout, shown
    assert proc.returncode == fault.rc, shown
    if fault.rc != 0:
        lines = [line for line in proc.stderr.splitlines() if line.strip()]
        assert lines, shown
        if fault.one_line:
            assert len(lines) == 1, shown
        assert ": error: " in lines[-1] and needle in lines[-1], shown
    else:
        assert needle in proc.stdout, shown
    if fault.progress_lines is not None:
        assert sum(line.startswith("tamper: ") for line in proc.stderr.splitlines()) == fault.progress_lines, shown
    for rel in fault.absent:
        assert not (tmp / rel).exists(), f"{rel} was written\n{shown}"
