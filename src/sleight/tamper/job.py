"""One ``tamper run`` as typed values: the model's :class:`~sleight.backends.spec.ModelSpec`, the
trials' :class:`TrialSettings`, where it writes. The command line builds a :class:`TamperJob` once;
a sweep builds one per (model, shard) and hands it to its worker (a Ray worker included: a job
pickles); :func:`prepare` checks it before any model loads and :func:`execute` runs it."""

from __future__ import annotations

import re
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from sleight.backends.spec import ModelSpec
from sleight.errors import UserError


@dataclass(frozen=True)
class TrialSettings:
    """What decides a run's trials (``tamper run``'s trial flags, a sweep file's ``run:`` section)."""

    questions: int | None = None  # the first N questions (None: all)
    substitutes: int | None = None  # the first N substitutes (None: all 101)
    questions_file: Path | None = None
    substitutes_file: Path | None = None
    trigger: str = "the"
    max_new_tokens: int = 256
    conventions: str = "study"
    punctuation_led: bool = False
    decoding: str | None = None  # None: lockstep on hf, two-phase on vllm
    schedule: str = "sweep"
    live_rows: int | None = None  # None: runner.LIVE_ROWS

    def __post_init__(self) -> None:
        for name in ("questions", "substitutes", "max_new_tokens", "live_rows"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise UserError(f"--{name.replace('_', '-')} must be at least 1 (got {value})")


TRIAL_KEYS: tuple[str, ...] = tuple(f.name for f in fields(TrialSettings))


@dataclass(frozen=True)
class TamperJob:
    """One run (or one shard of it) of one model into one run directory."""

    model: ModelSpec
    trials: TrialSettings = field(default_factory=TrialSettings)
    out: Path | None = None  # None: runs/<model-name>
    shard: str | None = None  # "K/N"
    overwrite: bool = False
    progress: bool = True

    @property
    def run_dir(self) -> Path:
        return Path(self.out) if self.out is not None else default_out(self.model.model)

    def with_(self, **changes: Any) -> TamperJob:
        return replace(self, **changes)


def default_out(model_spec: str) -> Path:
    """runs/<model-name>: the file or folder name of a path, the hub id with '/' made '--'."""
    p = Path(model_spec)
    name = p.stem if model_spec.endswith(".gguf") else (p.name if (p.exists() or model_spec.startswith((".", "/", "~"))) else model_spec.replace("/", "--"))
    return Path("runs") / (re.sub(r"[^A-Za-z0-9_.+-]", "_", name) or "model")


@dataclass
class Prepared:
    """A job checked and ready, before any model is loaded."""

    out: Path
    store: Any  # sleight.tamper.store.RunStore
    shard: Any  # sleight.rundir.Shard
    questions: list[Any]
    substitutes: list[str]
    sources: tuple[str, str]
    config: Any  # sleight.tamper.engine.TamperConfig
    decoding: str
    mine: list[int]  # this shard's question indices
    left: bool  # whether any of them is still to do

    def nothing_to_do(self) -> str:
        """Record the (no-op) session that may complete the run, and say so in one line."""
        if not (self.store.read_manifest() or {}).get("completed"):
            self.store.run.record_session(self.shard, completed=True)
        n = len(self.mine) * len(self.substitutes)
        what = f"{n} trials" if self.shard.whole else f"shard {self.shard}: {n} trials"
        return f"{what} already in {self.out}; this session: 0 question(s), nothing to do"


def check_scorer(spec: ModelSpec, conventions: str) -> None:
    """The full-vocabulary entropy of ``--conventions sleight`` is the one record vLLM cannot give:
    it needs the twin, asked for by name, never loaded silently."""
    if spec.engine == "vllm" and conventions == "sleight" and spec.scorer != "twin":
        raise UserError(
            "--conventions sleight records the exact full-vocabulary entropy, which vLLM does not return; "
            "add --scorer twin (an hf copy of the weights scores every token), or use the study's conventions"
        )


def prepare(job: TamperJob) -> Prepared:
    """Everything before the model: inputs validated, the output checked, a different config refused,
    the committed parts verified (a sweep's driver calls this for every task before scheduling)."""
    from sleight.tamper.data import load_questions, load_substitutes
    from sleight.tamper.trigger import validate_word

    t = job.trials
    try:
        validate_word(t.trigger)
    except ValueError as exc:
        raise UserError(f"--trigger: {exc}") from None
    check_scorer(job.model, t.conventions)
    from sleight.rundir import parse_shard  # pyarrow: only once the settings above are good

    shard = parse_shard(job.shard)
    questions, qsrc = load_questions(t.questions_file, t.questions)
    substitutes, ssrc = load_substitutes(t.substitutes_file, t.substitutes)
    out = job.run_dir
    from sleight.paths import check_writable

    check_writable(out, "--out")

    from sleight.backends import default_dtype
    from sleight.tamper.engine import TamperConfig
    from sleight.tamper.runner import check_conventions, run_config
    from sleight.tamper.store import RunStore

    try:
        config = TamperConfig(trigger=t.trigger, max_new_tokens=t.max_new_tokens, conventions=t.conventions, punctuation_led=t.punctuation_led)
    except ValueError as exc:
        raise UserError(f"--punctuation-led: {exc}") from None
    decoding = t.decoding or ("two-phase" if job.model.engine == "vllm" else "lockstep")
    # Refuse a directory made with another config before spending time loading the model.
    store = RunStore(out)
    spec = job.model
    cfg = run_config(spec.model, spec.engine, spec.dtype or default_dtype(spec.engine), config, questions, substitutes, qsrc, ssrc, decoding,
                     load=load_record(spec))  # fmt: skip
    if not job.overwrite:
        check_conventions(store, cfg)
    store.check_config(cfg, overwrite=job.overwrite)
    mine = shard.indices(len(questions))
    left = store.read_manifest() is None or not store.done(mine) >= set(mine)
    return Prepared(Path(out), store, shard, questions, substitutes, (qsrc, ssrc), config, decoding, mine, left)


def load_record(spec: ModelSpec) -> dict[str, Any]:
    """The load settings that change a vllm run's records (quantized weights score differently; the
    twin's entropy is another number), for the manifest's config; ``{}`` on hf."""
    if spec.engine != "vllm":
        return {}
    keep = ("revision", "quantization", "load_format", "scorer")
    return {k: getattr(spec, k) for k in keep if getattr(spec, k) is not None}


def execute(job: TamperJob) -> list[str]:
    """Run the job; its summary lines (a sweep task calls this in its worker)."""
    from sleight.backends import load_model
    from sleight.tamper.runner import LIVE_ROWS, run_tamper, trigger_note

    prep = prepare(job)
    if not prep.left:
        return [prep.nothing_to_do()]
    out, shard, t = prep.out, prep.shard, job.trials
    qsrc, ssrc = prep.sources
    model = load_model(job.model)
    summary = run_tamper(
        model, prep.questions, prep.substitutes, out, prep.config, question_source=qsrc, substitute_source=ssrc, progress=job.progress,
        shard=shard, decoding=prep.decoding, schedule=t.schedule, live_rows=t.live_rows or LIVE_ROWS,
    )  # fmt: skip
    rate = summary.new_questions * summary.substitutes / summary.seconds if summary.seconds > 0 else 0.0
    resumed = f", {summary.resumed_questions} question(s) were already done" if summary.resumed_questions else ""
    n_q = summary.shard_questions if summary.shard_questions is not None else summary.questions
    what = (
        f"{summary.trials} trials ({summary.questions} questions x {summary.substitutes} substitutes)"
        if shard.whole
        else f"shard {shard}: {n_q * summary.substitutes} trials ({n_q} of {summary.questions} questions x {summary.substitutes} substitutes)"
    )
    lines = [
        f"{what} in {out}{resumed}; "
        f"this session: {summary.new_questions} question(s), {summary.tokens} tokens in {summary.seconds:.1f}s ({rate:.2f} trials/s)"
    ]
    if summary.decoding == "two-phase":
        lines.append(f"two-phase decoding: {summary.disagreements} position(s) where the scoring pass's argmax is not the decided token")
    note = trigger_note(t.trigger, n_q, summary.untouched_questions)
    if note:
        lines.append(note)
    return lines
