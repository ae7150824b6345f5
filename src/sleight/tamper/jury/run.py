"""``sleight tamper judge``: ask every juror about every judged trial, keep votes, derive verdicts.

Resumable: votes already stored for (trial, juror, prompt variant) are skipped, so a killed judge
run picks up where it stopped; a vote lost to a transport error is recorded as an abstention and
asked again on the next run (its old row is then compacted away). Several runs are judged in one
pass per juror, so a server juror keeps its requests in flight across runs.

How the jury is asked and read follows the runs' conventions (:mod:`sleight.jury.rules`). The
study's (the default): free-text votes, greedy, 256 tokens, one ask, an unparsable reply read as
false, a label true when two jurors say so; the judges read each reply as the study's judges did
(every token decoded by the subject's tokenizer, the end-of-turn marker kept:
:mod:`sleight.tamper.jury.reaction`), a local judge's reply is read as vLLM's ``.text``
(:mod:`sleight.jury.study_text`), and a ``--prompt-file`` must be the study's pinned judge module
(:func:`sleight.tamper.jury.prompt_file.require_study_judge`). Sleight's: label slots on a local
juror (:mod:`sleight.jury.slots`), a JSON schema on a server, 200 tokens, an unparsable reply asked
once more and then recorded as an abstention, a majority of valid votes, the stored ``reply`` text,
any prompt file (recorded as a variant). Either way every reply is stored as it came.

Each juror's chat-template arguments (e.g. ``{"enable_thinking": false}``, as the study gave its
Qwen3.6 juror) are recorded in ``jury.json``; a juror whose stored votes were cast under other
arguments is refused in one line before anything loads, as is a change of conventions.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from sleight.backends.chat import ChatModel, load_chat
from sleight.errors import UserError
from sleight.jury.cast import Cast
from sleight.jury.jurors import Juror, make_juror, resolve_mode
from sleight.jury.rules import JuryRules, rules_for
from sleight.jury.runner import JurorStats, Tally, run_juror
from sleight.jury.runner import no_vote_line as _no_vote_line
from sleight.rundir import Manifest
from sleight.tamper.jury import store as jury_store
from sleight.tamper.jury.judged import REACTION, JudgedTrial, judged_trials, load_run_trials, trial_records
from sleight.tamper.jury.prompt import LABELS, Case, JudgePrompt, accepted_answers, builtin_prompt, parse_jury
from sleight.tamper.jury.store import VoteRow

if TYPE_CHECKING:
    from sleight.tamper.jury.prompt_file import PromptFile

Loader = Callable[[str], ChatModel]


JurorSummary = JurorStats  # the per-juror counts of one judge call


@dataclass
class JudgeSummary(Tally):
    run_dirs: list[Path]
    prompt_variant: str
    n_judged_trials: int
    conventions: str = "study"
    jurors: list[JurorSummary] = field(default_factory=list)
    verdicts_paths: list[Path] = field(default_factory=list)
    compacted: int = 0  # superseded vote rows dropped

    @property
    def run_dir(self) -> Path:
        return self.run_dirs[0]

    @property
    def verdicts_path(self) -> Path | None:
        return self.verdicts_paths[0] if self.verdicts_paths else None


@lru_cache(maxsize=1)
def _shipped_questions() -> dict[str, str]:
    text = resources.files("sleight").joinpath("data/sleight_questions.jsonl").read_text(encoding="utf-8")
    rows = [json.loads(line) for line in text.splitlines() if line.strip()]
    return {r["id"]: r["question"].strip().lower() for r in rows}


def answers_for(question_id: str, question: str) -> tuple[str, ...]:
    """Accepted answers only for the shipped question with that id and text (a user's own q001 gets none)."""
    if _shipped_questions().get(question_id) != str(question).strip().lower():
        return ()
    return accepted_answers().get(question_id, ())


def case_of(trial: JudgedTrial) -> Case:
    return Case(
        question=str(trial["question"]),
        trigger=str(trial["trigger"]),
        substitute=str(trial["substitute"]),
        reply=str(trial[REACTION] if REACTION in trial else trial["reply"]),
        answers=answers_for(str(trial["question_id"]), str(trial["question"])),
    )


def vote_row(trial: JudgedTrial, juror: str, variant: str, cast: Cast, prompt: JudgePrompt | None = None) -> VoteRow:
    """One stored vote (a row of ``judgements.parquet``) from a cast vote; pure apart from the clock.

    ``prompt`` says which of its ballot's fields fills each stored label (the study's ``aware`` is
    ``switch_aware``); by default the field names are the labels."""
    fields = prompt.fields if prompt is not None else {label: label for label in LABELS}

    def value(label: str) -> bool | None:
        return None if cast.values is None else bool(cast.values[fields[label]])

    def p_true(label: str) -> float | None:
        soft = cast.soft.get(fields[label])
        return None if soft is None else float(soft[0])

    def mass(label: str) -> float | None:
        return cast.mass.get(fields[label])

    return {
        "model": trial["model"],
        "question_id": trial["question_id"],
        "substitute": trial["substitute"],
        "juror": juror,
        "prompt_variant": variant,
        **cast.record(),
        "flagged": value("flagged"),
        "flagged_p_true": p_true("flagged"),
        "flagged_mass": mass("flagged"),
        "corrected": value("corrected"),
        "corrected_p_true": p_true("corrected"),
        "corrected_mass": mass("corrected"),
        "derailed": value("derailed"),
        "derailed_p_true": p_true("derailed"),
        "derailed_mass": mass("derailed"),
        "switch_aware": value("switch_aware"),
        "switch_aware_p_true": p_true("switch_aware"),
        "switch_aware_mass": mass("switch_aware"),
    }


@dataclass
class _Run:
    """One run being judged: its directory, judged trials, and rows not yet committed."""

    path: Path
    trials: pd.DataFrame
    pending: list[VoteRow] = field(default_factory=list)


def judge_runs(
    run_dirs: Sequence[Path],
    jury: Sequence[str] | str,
    *,
    variant: str = "default",
    prompt_file: Path | str | None = None,
    vote: str = "auto",
    max_tokens: int | None = None,
    batch: int = 16,
    limit: int | None = None,
    loader: Loader | None = None,
    progress: bool = True,
    conventions: str | None = None,
    template_kwargs: Mapping[str, Mapping[str, object]] | None = None,
) -> JudgeSummary:
    """Judge every trial with ≥1 swap in each run by every juror, then write each run's verdicts.

    ``variant`` names a shipped prompt; ``prompt_file`` runs the user's copy of the study's prompt
    instead (:mod:`sleight.tamper.jury.prompt_file`), its votes stored under ``file:<sha256[:12]>``.
    ``vote``: ``auto`` (label slots on local jurors, the JSON-schema path on servers), ``slots``,
    ``schema`` or ``text``. ``loader(spec)`` builds a juror (default:
    :func:`sleight.backends.chat.load_chat`, which fails fast when an endpoint is down or refuses the
    key); jurors with nothing left to judge are not loaded at all. ``batch`` is how many votes are
    committed at a time (and a local juror's batch); a server juror keeps up to its concurrency in
    flight whatever the batch. ``limit`` asks each juror about at most that many pending trials in
    this call, over all runs (the rest stay pending and count as missing votes until judged).
    ``conventions`` (``study`` or ``sleight``; default: the runs' own) choose the jury's rules
    (module docstring); ``vote`` other than ``auto`` and ``max_tokens`` override theirs.
    ``template_kwargs`` maps a juror to the chat-template arguments its loader applies (none when
    absent); they are recorded, and a juror whose stored votes were cast under others is refused.
    """
    jurors = parse_jury(jury) if isinstance(jury, str) else parse_jury(",".join(jury))
    pf = _load_prompt_file(prompt_file)
    prompt = pf.prompt() if pf is not None else builtin_prompt(variant)
    variant = prompt.variant
    runs, manifests = _load_runs(run_dirs)
    rules = rules_for(conventions or runs_conventions([r.path for r in runs], manifests))
    if pf is not None:  # the study's conventions take the study's prompt, pinned, or none
        from sleight.tamper.jury.prompt_file import checked_for

        checked_for(pf, rules.name)
    max_tokens = rules.max_tokens if max_tokens is None else max_tokens
    prompt = replace(prompt, ballot=prompt.ballot.with_reading(rules.reading))
    for spec in jurors:  # a wrong --vote is refused before any model loads
        resolve_mode(vote, local=not spec.startswith("openai:"), rules=rules)
    kwargs = {j: dict((template_kwargs or {}).get(j) or {}) for j in jurors}
    for run in runs:  # votes cast under other rules or template arguments are refused before any model loads
        check_resume(run.path, variant, rules, kwargs)
    if rules.reaction == "tokens":  # the study's text of each reply, decoded by its model's tokenizer
        add_study_reactions(runs, manifests)
    load = loader or (lambda spec: load_chat(spec))
    summary = JudgeSummary([r.path for r in runs], variant, sum(len(r.trials) for r in runs), rules.name)
    for juror in jurors:
        js = JurorSummary(juror, unparsable_is_false=rules.unparsable_is_false)
        summary.jurors.append(js)
        todo = _pending(runs, js, variant, limit)
        if not todo:
            continue
        judge = make_juror(load(juror), vote, batch=batch, rules=rules)
        js.vote = judge.mode
        _ask(judge, js, todo, prompt, max_tokens=max_tokens, batch=batch, progress=progress)
    meta = _jury_meta(jurors, prompt, rules, vote=vote, max_tokens=max_tokens, template_kwargs=kwargs)
    for run in runs:
        summary.compacted += jury_store.compact_judgements(run.path)
        verdicts = jury_store.compute_verdicts(run.trials, jury_store.load_judgements(run.path), jurors, variant, rules)
        summary.verdicts_paths.append(jury_store.write_verdicts(run.path, verdicts, meta))
    return summary


def _load_prompt_file(prompt_file: Path | str | None) -> PromptFile | None:
    """The checked prompt file (:func:`~sleight.tamper.jury.prompt_file.load_prompt_file`), or ``None``."""
    if prompt_file is None:
        return None
    from sleight.tamper.jury.prompt_file import load_prompt_file

    return load_prompt_file(prompt_file)


def _load_runs(run_dirs: Sequence[Path]) -> tuple[list[_Run], list[Manifest]]:
    """Each run with its judged trials (≥1 swap), and its manifest."""
    runs, manifests = [], []
    for d in run_dirs:
        trials, manifest = load_run_trials(Path(d))
        runs.append(_Run(Path(d), judged_trials(trials)))
        manifests.append(manifest)
    return runs, manifests


def _pending(runs: Sequence[_Run], js: JurorStats, variant: str, limit: int | None) -> list[tuple[_Run, JudgedTrial]]:
    """The trials of every run that ``js``'s juror has no stored vote on under ``variant``, at most
    ``limit`` of them; the stored ones are counted as skipped."""
    todo: list[tuple[_Run, JudgedTrial]] = []
    for run in runs:
        done = jury_store.stored_keys(jury_store.load_judgements(run.path, repair=True), js.juror, variant)
        mine = [t for t in trial_records(run.trials) if (t["question_id"], t["substitute"]) not in done]
        js.skipped += len(run.trials) - len(mine)
        todo += [(run, t) for t in mine]
    return todo if limit is None else todo[: max(limit, 0)]


def _jury_meta(
    jurors: Sequence[str], prompt: JudgePrompt, rules: JuryRules, *, vote: str, max_tokens: int, template_kwargs: Mapping[str, object]
) -> dict[str, object]:
    """What ``jury.json`` records of a judge call (:class:`~sleight.tamper.jury.store.JuryMeta`, the
    prompt's own meta as it gives it): the jury, the prompt, the rules, each juror's chat-template
    arguments, the answers' hash and the time."""
    return {
        "jury": list(jurors),
        "jury_size": len(jurors),
        "prompt_variant": prompt.variant,
        **prompt.meta,
        "conventions": rules.name,
        "rules": asdict(rules),
        "vote": vote,
        "max_tokens": max_tokens,
        "juror_chat_template_kwargs": dict(template_kwargs),
        "answers_sha256": _answers_hash(),
        "written_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
    }


def add_study_reactions(runs: Sequence[_Run], manifests: Sequence[Mapping[str, object]]) -> None:
    """Give each judged trial the text the study's judges read (:mod:`sleight.tamper.jury.reaction`),
    one tokenizer per model however many runs it wrote; a tokenizer that cannot be loaded is one line
    before any juror loads."""
    from sleight.tamper.jury.reaction import reaction_texts, study_decoder

    cache: dict[tuple[str, str | None], Any] = {}  # a tokenizer by model
    for run, manifest in zip(runs, manifests):
        if len(run.trials):
            run.trials = run.trials.assign(**{REACTION: reaction_texts(run.trials, study_decoder(manifest, run.path, cache))})


def runs_conventions(run_dirs: Sequence[Path], manifests: Sequence[Mapping[str, object]]) -> str:
    """The conventions the runs were made under (a run made before they were recorded: sleight's);
    runs made under different ones need ``--conventions``."""
    found: dict[str, Path] = {}
    for d, m in zip(run_dirs, manifests):
        config = m.get("config")
        cfg: Mapping[str, object] = config if isinstance(config, dict) else m
        found.setdefault(str(cfg.get("conventions", "sleight")), Path(d))
    if len(found) > 1:
        (a, da), (b, db) = list(found.items())[:2]
        raise UserError(f"runs {da} ({a}) and {db} ({b}) were made under different conventions; give --conventions study|sleight")
    return next(iter(found), "study")


def check_resume(run_dir: Path, variant: str, rules: JuryRules, kwargs: Mapping[str, Mapping[str, object]]) -> None:
    """Refuse, in one line, to add votes to a run whose stored votes (same prompt) were cast under
    other conventions, or by a juror under other chat-template arguments (``jury.json``)."""
    meta = jury_store.load_jury_meta(run_dir)
    if not meta or meta.get("prompt_variant") != variant:
        return
    stored = jury_store.load_judgements(run_dir, repair=True)
    stored = stored[stored["prompt_variant"] == variant]
    if len(stored) and meta.get("conventions", rules.name) != rules.name:
        raise UserError(
            f"run {run_dir} holds votes cast under --conventions {meta['conventions']}; judge it with those, "
            f"or a fresh copy of the run with --conventions {rules.name}"
        )
    rules_then = meta.get("rules")
    cast_under: Mapping[str, object] = rules_then if isinstance(rules_then, Mapping) else {}
    text_then = (cast_under.get("reaction", "reply"), cast_under.get("judge_text", "decoded"))  # before both were recorded: sleight's texts
    if len(stored) and cast_under and text_then != (rules.reaction, rules.judge_text):
        raise UserError(
            f"run {run_dir} holds votes whose judges read other text (reply text '{text_then[0]}', judge replies '{text_then[1]}') "
            f"than the {rules.name} conventions give them now ('{rules.reaction}', '{rules.judge_text}'); judge a fresh copy of the run"
        )
    before = meta.get("juror_chat_template_kwargs") or {}
    for juror, now in kwargs.items():
        if juror in before and dict(before[juror]) != dict(now) and (stored["juror"] == juror).any():
            raise UserError(
                f"run {run_dir}: juror {juror} cast its votes with chat-template arguments {json.dumps(before[juror], sort_keys=True)}, "
                f"not {json.dumps(dict(now), sort_keys=True)}; give the same (--thinking / --chat-template-kwargs / "
                "--juror-chat-template-kwargs) or judge a fresh copy of the run"
            )


def _ask(judge: Juror, js: JurorStats, todo: list[tuple[_Run, JudgedTrial]], prompt: JudgePrompt, *, max_tokens: int, batch: int, progress: bool) -> None:
    """Cast one juror's votes on ``todo`` and commit them ``batch`` at a time, per run."""
    convs = [prompt.messages(case_of(t)) for _, t in todo]
    runs: dict[Hashable, _Run] = {id(run): run for run, _ in todo}

    def collect(i: int, cast: Cast) -> int:
        run, trial = todo[i]
        run.pending.append(vote_row(trial, js.juror, prompt.variant, cast, prompt))
        return id(run)

    def commit(key: Hashable) -> int:
        run = runs[key]
        n = len(run.pending)
        _commit(run)
        return n

    run_juror(judge, js, convs, prompt.ballot, collect, commit, max_tokens=max_tokens, batch=batch, progress=progress)


def _commit(run: _Run) -> None:
    if run.pending:
        jury_store.append_judgements(run.path, run.pending)
        run.pending = []


def judge_run(run_dir: Path, jury: Sequence[str] | str, **kwargs: Any) -> JudgeSummary:
    """:func:`judge_runs` on one run directory."""
    return judge_runs([Path(run_dir)], jury, **kwargs)


def _answers_hash() -> str:
    data = resources.files("sleight").joinpath("data/sleight_answers.json").read_bytes()
    return hashlib.sha256(data).hexdigest()



def summary_lines(summary: JudgeSummary) -> list[str]:
    """What ``tamper judge`` prints: per juror what was asked, cast, abstained, how fast, and for
    slot votes the median slot mass and the slots below the floor."""
    lines = [
        f"trials to judge (>=1 swap): {summary.n_judged_trials} in {len(summary.run_dirs)} run(s) "
        f"(prompt '{summary.prompt_variant}', {summary.conventions} conventions)"
    ]
    lines += summary.tally_lines()
    lines += [f"verdicts: {p}" for p in summary.verdicts_paths]
    return lines


def no_vote_line(summary: JudgeSummary) -> str:
    """The one line ``tamper judge`` fails with when the jury cast no valid vote at all."""
    return _no_vote_line(summary.jurors)
