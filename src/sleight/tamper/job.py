"""One ``tamper run`` as typed values: the model's :class:`~sleight.backends.spec.ModelSpec`, the
trials' :class:`TrialSettings`, where it writes. The command line builds a :class:`TamperJob` once;
a sweep builds one per (model, shard) and hands it to its worker (a Ray worker included: a job
pickles); :func:`prepare` checks it before any model loads and :func:`execute` runs it."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sleight.backends.spec import ModelSpec
from sleight.errors import UserError
from sleight.tamper.data import ENTITY_INDEX, Question, digest
from sleight.tamper.engine import QuestionSet, SubstituteSet, TamperConfig, TamperRunConfig

if TYPE_CHECKING:
    from sleight.tamper.store import RunStore


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
    """runs/<model-name>: the file or folder name of a path, the hub id with '/' made '--', a served
    model's name and its server's host and port (``openai:http://h:8000/v1#m``: ``m--h_8000``)."""
    from urllib.parse import urlsplit

    from sleight.backends.spec import served
    from sleight.backends.transport import parse_openai_spec

    p = Path(model_spec)
    if served(model_spec):
        base, served_name = parse_openai_spec(model_spec)
        name = f"{served_name.replace('/', '--')}--{urlsplit(base).netloc}"
    elif model_spec.endswith(".gguf"):
        name = p.stem
    else:
        name = p.name if (p.exists() or model_spec.startswith((".", "/", "~"))) else model_spec.replace("/", "--")
    return Path("runs") / (re.sub(r"[^A-Za-z0-9_.+-]", "_", name) or "model")


@dataclass
class Prepared:
    """A run checked and ready, before any model is loaded: its inputs, its manifest ``config``
    (built once, here, with the model's load settings) and the run directory opened against it."""

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
    spec: ModelSpec
    run_config: TamperRunConfig  # the manifest's config: everything that decides the records

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
    if spec.engine == "openai" and conventions == "sleight":
        raise UserError(
            "--conventions sleight records the exact full-vocabulary entropy, which an OpenAI-compatible server does not "
            "return (top-k log-probs only); use the study's conventions"
        )
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
    try:
        config = TamperConfig(trigger=t.trigger, max_new_tokens=t.max_new_tokens, conventions=t.conventions, punctuation_led=t.punctuation_led)
    except ValueError as exc:
        raise UserError(f"--punctuation-led: {exc}") from None
    return plan_run(
        job.model, questions, substitutes, job.run_dir, config, sources=(qsrc, ssrc), decoding=t.decoding, shard=shard, overwrite=job.overwrite
    )


def plan_run(
    spec: ModelSpec,
    questions: Sequence[Any],
    substitutes: Sequence[str],
    out: Path | str,
    config: Any = None,
    *,
    sources: tuple[str, str] = ("shipped", "shipped"),
    decoding: str | None = None,
    shard: Any = None,
    overwrite: bool = False,
) -> Prepared:
    """The one place a run's manifest config is built and its directory checked against it: a
    directory made with another config (other weights, another quantization or revision, another
    scorer, other trials) is refused in one line, before any model loads. ``decoding`` None:
    lockstep on hf, two-phase on vllm."""
    from sleight.backends import default_dtype
    from sleight.paths import check_writable
    from sleight.rundir import ALL
    from sleight.tamper.store import RunStore

    check_writable(out, "--out")
    config = config or TamperConfig()
    shard = shard or ALL
    decoding = decoding or ("two-phase" if spec.engine in ("vllm", "openai") else "lockstep")
    spec = spec if spec.dtype or spec.engine == "openai" else spec.with_(dtype=default_dtype(spec.engine))  # a server's dtype is its own
    store = RunStore(out)
    cfg = run_config(spec, config, questions, substitutes, *sources, decoding)
    if not overwrite:
        check_conventions(store, cfg.as_record())
    store.check_config(cfg, overwrite=overwrite)
    mine = shard.indices(len(questions))
    left = store.read_manifest() is None or not store.done(mine) >= set(mine)
    return Prepared(Path(out), store, shard, list(questions), list(substitutes), sources, config, decoding, mine, left, spec, cfg)


def run_config(
    spec: ModelSpec,
    config: TamperConfig,
    questions: Sequence[Question],
    substitutes: Sequence[str],
    question_source: str = "shipped",
    substitute_source: str = "shipped",
    decoding: str = "lockstep",
) -> TamperRunConfig:
    """The manifest's ``config``: everything that decides the records (compared on resume).

    ``conventions`` and ``punctuation_led`` (from ``config``) are compared by :func:`check_conventions`;
    ``load``: the spec's load settings that change the records (revision, quantization, load format,
    scorer; absent for a plain load). Built once per run, by :func:`sleight.tamper.job.plan_run`.
    """
    return TamperRunConfig(
        model=spec.model,
        engine=spec.engine,
        dtype=spec.dtype,
        decoding=decoding,
        load=spec.load_record(),
        tamper=config,
        questions=QuestionSet(len(questions), digest([[q.id, q.question] for q in questions]), questions[0].id),
        substitutes=SubstituteSet(len(substitutes), digest(list(substitutes)), substitutes[ENTITY_INDEX]),
        question_source=question_source,
        substitute_source=substitute_source,
    )


CONVENTION_KEYS = ("conventions", "punctuation_led")


def _conventions_flags(conventions: object, punctuation_led: object) -> str:
    return f"--conventions {conventions}" + (" --punctuation-led" if punctuation_led else "")


def check_conventions(store: RunStore, config: Mapping[str, object]) -> None:
    """Refuse, in one line, to resume a run directory made under other conventions. A directory made
    before they were recorded was made with sleight's own (``--conventions sleight``), and resumes so."""
    old = store.read_manifest()
    if old is None:
        return
    was = old.get("config") or {}
    then = {"conventions": was.get("conventions", "sleight"), "punctuation_led": bool(was.get("punctuation_led", False))}
    now = {k: config.get(k, TamperConfig.__dataclass_fields__[k].default) for k in CONVENTION_KEYS}
    if then != now:
        how = "before the conventions were recorded, so with" if "conventions" not in was else "with"
        raise UserError(
            f"run directory {store.dir} was made {how} {_conventions_flags(*then.values())}, not {_conventions_flags(*now.values())}; "
            "pass those flags to resume it, use another --out, or --overwrite to start over"
        )
