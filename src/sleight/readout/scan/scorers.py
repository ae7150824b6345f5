"""Published scorer specifications as presets: where each reads, what it reads, how it parses.

The readout study audited the field's own scorers (its Appendix E-G), not only its own prompt. Each
:class:`ScorerPreset` names its source (paper, repository, files, revision) and defines what is
audited: how the prompt is rendered (``completion``: the filled template is the context as is;
``chat``: one user turn, optionally after a system turn, through the model's chat template;
``chatml``: a template written as ``<|im_start|>role ... <|im_end|>`` turns, split into messages and
rendered through the model's template), the declared option set and its label format, the scored
position (the next token after the rendered context), the published parser, and the repair the
study tried (a supplied separator, an answer stem, or labels that carry their own separator).

The shipped templates in ``sleight/data/scorers/`` are project-written: the same structure as the
published ones (the same placeholders, the same ending, the same option set), different wording.
``template=`` takes the published template itself (the user's own copy), so the real thing is
audited with the same placeholders. Filling is by plain replacement of each placeholder, as G-Eval
and AlpacaEval do it (their templates hold literal braces that ``str.format`` would reject).

One explicit list (:data:`SCORERS`) is the registry; nothing else defines a preset.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any, TypedDict

from sleight.errors import UserError
from sleight.readout.audit.items import AuditItem
from sleight.readout.items import load_jsonl_records

RENDERINGS = ("completion", "chat", "chatml")
PARSERS = ("first_token", "full_sequence", "text")
LETTERS = ("A", "B", "C", "D")


@dataclass(frozen=True)
class Source:
    """Where a specification is published: the paper, and the code where there is any."""

    paper: str
    url: str
    repo: str | None = None
    files: tuple[str, ...] = ()
    revision: str | None = None  # the commit (or tag) the preset was read from

    def as_record(self) -> dict[str, object]:
        return {"paper": self.paper, "url": self.url, "repo": self.repo, "files": list(self.files), "revision": self.revision}

    @classmethod
    def from_record(cls, d: Mapping[str, Any]) -> Source:
        return cls(str(d["paper"]), str(d["url"]), d.get("repo"), tuple(d.get("files") or ()), d.get("revision"))


@dataclass(frozen=True)
class Repair:
    """What the study tried instead: ``separator`` appends ``text`` to the rendered context when it
    ends without whitespace, ``stem`` prefills ``text`` (in the assistant turn, or after a completion
    prompt), ``labels`` reads other label strings at the same position. ``options`` are read there."""

    kind: str
    text: str
    options: tuple[str, ...]
    description: str


@dataclass(frozen=True, kw_only=True)
class ScorerPreset:
    """One published scorer, as audited (see the module docstring). A field left out is the common
    case: a completion prompt whose next token is read, no system turn, no quoted item."""

    name: str
    title: str
    source: Source
    rendering: str = "completion"
    template: str  # shipped file in sleight/data/scorers
    placeholders: tuple[tuple[str, str], ...]  # (placeholder as written in the template, record field)
    options: tuple[str, ...]
    parser: str = "first_token"  # first_token | full_sequence | text
    parser_note: str
    repair: Repair
    fixture: str  # shipped records in sleight/data/scorers
    system: str | None = None  # chat rendering: the system turn, if the scorer sends one
    letters: tuple[str, ...] = ()  # answer letters of a quoted item, if the prompt quotes one
    text_parser: str | None = None  # name in sleight.readout.scan.text_parsers (parser == "text")
    score_scale: float = 100.0  # numeric options: score = sum(int(o) / scale * p_o)
    target: Callable[[Mapping[str, object]], float | None] = field(default=lambda rec: None, compare=False)
    expand: Callable[[Mapping[str, Any]], list[dict[str, object]]] | None = field(default=None, compare=False)  # a checked JSON record
    dimension: str | None = None  # G-Eval: the SummEval dimension the prompt asks about (App. G); None: coherence

    @property
    def label_format(self) -> str:
        """How the declared labels are written: ``space-prefixed`` (each after its own space) or ``bare``."""
        return "space-prefixed" if all(o.startswith(" ") for o in self.options) else "bare"

    @property
    def spaced_options(self) -> tuple[str, ...]:
        """The declared labels with exactly one leading space (the other label format)."""
        return tuple(" " + o.lstrip() for o in self.options)

    @property
    def fields(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(f for _, f in self.placeholders))


# -- OpenCompass's grader: the quoted item rotated so its gold letter visits every position ---------
def grader_rotations(rec: Mapping[str, Any]) -> list[dict[str, object]]:
    """Four copies of a lettered item, the choices rotated so the gold choice sits at A, B, C, D.

    The candidate's prediction is the gold choice's text (a correct answer, so a grader that judges
    says A every time); ``prediction`` in the record overrides it (``{letter}`` and ``{text}`` are
    filled per rotation). The gold target is the rotated gold letter, as OpenCompass's MMLU grader
    is given it.
    """
    choices, gold = list(rec["choices"]), LETTERS.index(rec["answer"])
    out = []
    for pos, letter in enumerate(LETTERS):
        shift = (gold - pos) % 4
        rotated = choices[shift:] + choices[:shift]
        text = choices[gold]
        prediction = str(rec.get("prediction", "{text}")).replace("{letter}", letter).replace("{text}", text)
        out.append(
            {
                "id": f"{rec['id']}@{letter}",
                "input": rec["question"],
                **dict(zip(LETTERS, rotated)),
                "target": letter,
                "prediction": prediction,
                "gold_letter": letter,
                "item": str(rec["id"]),
                "choices": rotated,
            }
        )
    return out


def _check_grader(rec: Mapping[str, Any], where: str) -> None:
    ch = rec.get("choices")
    if not isinstance(ch, list) or len(ch) != 4 or not all(isinstance(c, str) and c for c in ch):
        raise UserError(f"{where}: 'choices' must be a list of 4 non-empty strings")
    if rec.get("answer") not in LETTERS:
        raise UserError(f"{where}: 'answer' must be one of A, B, C, D")
    if not isinstance(rec.get("question"), str) or not rec["question"]:
        raise UserError(f"{where}: 'question' must be a non-empty string")


def _num(key: str) -> Callable[[Mapping[str, object]], float | None]:
    def get(rec: Mapping[str, object]) -> float | None:
        v = rec.get(key)
        return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None

    return get


class _Records(TypedDict):
    """The records a preset reads: the shipped fixture, its quoted item's letters, its target."""

    fixture: str
    letters: tuple[str, ...]
    target: Callable[[Mapping[str, object]], float | None]


# Both P(True) presets read the shipped question-answer pairs: a question and a proposed answer,
# the answer's letter A (true) or B (false), the pair's 0/1 label the target.
_QA_PAIRS = _Records(fixture="qa_pairs.jsonl", letters=("A", "B"), target=_num("label"))

SCORERS: dict[str, ScorerPreset] = {
    p.name: p
    for p in (
        ScorerPreset(
            name="geval", title="G-Eval coherence (1-5)",
            source=Source(
                "Liu et al. 2023, G-Eval: NLG Evaluation using GPT-4 with Better Human Alignment (EMNLP)", "https://arxiv.org/abs/2303.16634",
                repo="nlpyang/geval", files=("prompts/summeval/coh_detailed.txt", "gpt4_eval.py"), revision="8f54105061e00377fbb909153892d5bfb5b3623a",
            ),
            template="geval_coherence.txt", placeholders=(("{{Document}}", "document"), ("{{Summary}}", "summary")),
            options=("1", "2", "3", "4", "5"), score_scale=1.0,
            parser_note="probability-weighted grade over the first tokens of 1-5 after '- Coherence:'",
            repair=Repair("separator", " ", ("1", "2", "3", "4", "5"), "a space supplied after '- Coherence:', bare grades"),
            fixture="geval_items.jsonl", target=_num("coherence"),
        ),
        ScorerPreset(
            name="relevance", title="Fine-grained relevance labels (Zhuang et al.)",
            source=Source(
                "Zhuang et al. 2024, Beyond Yes and No: Improving Zero-Shot LLM Rankers via Scoring Fine-Grained Relevance Labels (NAACL)",
                "https://arxiv.org/abs/2310.14122",
            ),
            template="relevance_labels.txt", placeholders=(("{query}", "query"), ("{document}", "document")),
            options=("Highly Relevant", "Somewhat Relevant", "Not Relevant"),
            parser="full_sequence", parser_note="full-sequence log-likelihood of each label after 'Output:', renormalised over the three",
            repair=Repair("labels", "", (" Highly Relevant", " Somewhat Relevant", " Not Relevant"), "labels written with their leading space"),
            fixture="relevance_items.jsonl", target=_num("relevance"),
        ),
        ScorerPreset(
            name="alpacaeval", title="AlpacaEval 2.0 log-prob annotator (m / M)",
            source=Source(
                "Dubois et al. 2024, Length-Controlled AlpacaEval: A Simple Way to Debias Automatic Evaluators", "https://arxiv.org/abs/2404.04475",
                repo="tatsu-lab/alpaca_eval",
                files=(
                    "src/alpaca_eval/evaluators_configs/alpaca_eval_clf_gpt4_turbo/alpaca_eval_clf.txt",
                    "src/alpaca_eval/evaluators_configs/weighted_alpaca_eval_gpt4_turbo/configs.yaml",
                    "src/alpaca_eval/completion_parsers.py",
                ),
                revision="8fd5c59e85ca3fa3d0ec39a9c9aa87c49ebb8924",
            ),
            rendering="chatml", template="alpacaeval_clf.txt",
            placeholders=(("{instruction}", "instruction"), ("{output_1}", "output_1"), ("{output_2}", "output_2")),
            options=("m", "M"),
            parser_note="logprob_parser: p('m') / (p('m') + p('M')) at the first generated token (max_tokens 1)",
            repair=Repair("separator", "\n", ("m", "M"), "a newline supplied where the rendered ending has no whitespace"),
            fixture="alpaca_items.jsonl", target=lambda rec: None if rec.get("preference") not in (1, 2) else float(rec["preference"] == 1),
        ),
        ScorerPreset(
            name="kadavath", title="Kadavath et al. P(True)",
            source=Source("Kadavath et al. 2022, Language Models (Mostly) Know What They Know (section 3)", "https://arxiv.org/abs/2207.05221"),
            template="kadavath_ptrue.txt", placeholders=(("{question}", "question"), ("{answer}", "answer")),
            options=(" (A)", " (B)"),
            parser_note="P(True): probability of ' (A)' against ' (B)' after 'The proposed answer is:'",
            repair=Repair("stem", " (", ("A", "B"), "answer stem ' (' supplied, then the bare letters"),
            **_QA_PAIRS,
        ),
        ScorerPreset(
            name="opencompass", title="OpenCompass LLM-judge grader (first A or B)",
            source=Source(
                "OpenCompass Contributors 2023, OpenCompass: A Universal Evaluation Platform for Foundation Models", "https://github.com/open-compass/opencompass",
                repo="open-compass/opencompass",
                files=("opencompass/configs/datasets/mmlu/mmlu_llmjudge_gen_f4336b.py", "opencompass/datasets/generic.py"),
                revision="e12c89ad1790f0c84630b7982be9625a0411ac42",
            ),
            rendering="chat", system="You are a helpful assistant who grades the answers of other models.", template="opencompass_grader.txt",
            placeholders=(
                ("{input}", "input"), ("{A}", "A"), ("{B}", "B"), ("{C}", "C"), ("{D}", "D"),
                ("{target}", "target"), ("{prediction}", "prediction"),
            ),
            options=("A", "B"), letters=LETTERS,
            parser="text", text_parser="first_uppercase_ab",
            parser_note="_generic_llmjudge_postprocess: the first 'A' or 'B' anywhere in the greedy reply (re.search)",
            repair=Repair("stem", "Grade:", (" A", " B"), "answer stem 'Grade:' in the assistant turn, then ' A' / ' B'"),
            # every constructed prediction is the gold choice: the verdict should be A
            fixture="grader_items.jsonl", target=lambda rec: 1.0, expand=grader_rotations,
        ),
        ScorerPreset(
            name="lmpolygraph", title="lm-polygraph P(True) (instruct mode)",
            source=Source(
                "Fadeeva et al. 2023, LM-Polygraph: Uncertainty Estimation for Language Models (EMNLP demo)", "https://arxiv.org/abs/2311.07383",
                repo="IINemo/lm-polygraph", files=("src/lm_polygraph/stat_calculators/prompt.py", "src/lm_polygraph/utils/model.py"),
                revision="v0.7.0 (6d3a5740b602ac4b4f956fa044f83705c6c3d367)",
            ),
            rendering="chat", template="lmpolygraph_ptrue.txt", placeholders=(("{q}", "question"), ("{a}", "answer")),
            options=("True", "False"),
            parser_note="log p('True') at the first generated token, 'True' encoded alone (see sleight.readout.ptrue.readouts)",
            repair=Repair("stem", "The possible answer is (", ("A", "B"), "answer stem 'The possible answer is (' (the Moved readout)"),
            **_QA_PAIRS,
        ),
    )
}


# -- templates and records -------------------------------------------------------------------------
def _data(name: str) -> str:
    return resources.files("sleight").joinpath("data").joinpath("scorers").joinpath(name).read_text(encoding="utf-8")


def get_scorer(name: str) -> ScorerPreset:
    """A preset by name; ``geval:DIMENSION`` is G-Eval's prompt for one SummEval dimension (App. G)."""
    base, _, dim = name.partition(":")
    if base == "geval" and dim:
        return geval_dimension(dim)
    if name not in SCORERS:
        raise UserError(f"unknown scorer preset '{name}' (choose from {', '.join(SCORERS)}, or geval:{'|'.join(GEVAL_DIMENSIONS)})")
    return SCORERS[name]


def parse_presets(text: str | None) -> tuple[str, ...]:
    """``--presets``: comma-separated names, or ``all`` (the default)."""
    if not text or text.strip() == "all":
        return tuple(SCORERS)
    names = [n.strip() for n in text.split(",") if n.strip()]
    for n in names:
        get_scorer(n)
    return tuple(dict.fromkeys(names))


def template_text(preset: ScorerPreset, path: str | Path | None = None) -> str:
    """The shipped template, or the user's copy of the published one (read as is, no stripping),
    checked to hold every placeholder the preset fills."""
    if path is None:
        text = _data(preset.template)
        return geval_template(text, preset.dimension) if preset.dimension else text
    p = Path(path)
    if not p.is_file():
        raise UserError(f"template file not found: {p}")
    text = p.read_text(encoding="utf-8")
    missing = [ph for ph, _ in preset.placeholders if ph not in text]
    if missing:
        raise UserError(f"{p.name}: the {preset.name} template needs the placeholder(s) {', '.join(missing)}")
    return text


def scorer_records(preset: ScorerPreset, path: str | Path | None = None) -> list[dict[str, object]]:
    """Records for a preset: the shipped fixture or a user JSONL; each checked for the fields its
    template needs (errors name the file and line), then expanded (OpenCompass: four rotations)."""
    if path is None:
        pairs = [(json.loads(line), f"{preset.fixture} line {n}") for n, line in enumerate(_data(preset.fixture).splitlines(), 1) if line.strip()]
    else:
        pairs = load_jsonl_records(path)
    out: list[dict[str, object]] = []
    for rec, where in pairs:
        if "id" not in rec or rec["id"] in (None, ""):
            raise UserError(f"{where}: missing 'id'")
        if preset.expand is not None:
            _check_grader(rec, where)
            out += preset.expand(rec)
            continue
        missing = [f for f in preset.fields if not isinstance(rec.get(f), str)]
        if missing:
            raise UserError(f"{where}: the {preset.name} preset needs string field(s) {', '.join(missing)}")
        out.append(dict(rec))
    ids = [str(r["id"]) for r in out]
    if len(set(ids)) != len(ids):
        dup = sorted({i for i in ids if ids.count(i) > 1})
        raise UserError(f"{preset.name} records: duplicate id(s) {', '.join(dup[:3])}")
    return out


def fill(template: str, placeholders: Sequence[tuple[str, str]], record: Mapping[str, object]) -> str:
    """Each placeholder replaced by its field's text (plain replacement, as the published code does)."""
    text = template
    for ph, fld in placeholders:
        text = text.replace(ph, str(record[fld]))
    return text


_CHATML = re.compile(r"<\|im_start\|>(\w+)\n(.*?)<\|im_end\|>", re.DOTALL)


def chatml_messages(text: str) -> tuple[dict[str, str], ...]:
    """Turns of a ChatML-written template, as AlpacaEval splits them (content stripped)."""
    turns = tuple({"role": role, "content": content.strip()} for role, content in _CHATML.findall(text))
    if not turns:
        raise UserError("the template has no <|im_start|>role ... <|im_end|> turns")
    return turns


def messages_for(preset: ScorerPreset, filled: str) -> tuple[dict[str, str], ...]:
    if preset.rendering == "chatml":
        return chatml_messages(filled)
    if preset.rendering == "chat" and preset.system:
        return ({"role": "system", "content": preset.system}, {"role": "user", "content": filled})
    return ({"role": "user", "content": filled},)


def scorer_items(
    name: str,
    records: Sequence[Mapping[str, object]] | None = None,
    *,
    template: str | Path | None = None,
    limit: int | None = None,
) -> list[AuditItem]:
    """Audit items of a preset: each record's filled template at the preset's scored position.

    ``limit`` counts source records (an OpenCompass item with its four rotations counts once).
    The answer stem of a ``stem`` repair with the declared options is the item's stem, so the audit's
    ``stem`` variant is the repaired position; other repairs are read by the scan.
    """
    preset = get_scorer(name)
    text = template_text(preset, template)
    recs = list(records) if records is not None else scorer_records(preset)
    if limit is not None:
        keep = list(dict.fromkeys(str(r.get("item", r["id"])) for r in recs))[:limit]
        recs = [r for r in recs if str(r.get("item", r["id"])) in keep]
    if not recs:
        raise UserError(f"preset '{name}': no records")
    stem = preset.repair.text if preset.repair.kind == "stem" and preset.repair.options == preset.options else None
    items = []
    for rec in recs:
        filled = fill(text, preset.placeholders, rec)
        choices = rec.get("choices")
        question = rec.get("input")  # the quoted item's question (a checked string) where the preset expands one
        items.append(
            AuditItem(
                id=str(rec["id"]),
                messages=messages_for(preset, filled),
                options=preset.options,
                choices=tuple(choices) if isinstance(choices, list) else None,
                question=question if preset.expand is not None and isinstance(question, str) else None,
                letters=preset.letters,
                target=preset.target(rec),
                stem=stem,
                score_scale=preset.score_scale,
                chat_template=preset.rendering != "completion",
                meta={k: v for k, v in rec.items() if k not in preset.fields and k not in ("id", "choices")},
            )
        )
    return items


# -- G-Eval's four SummEval dimensions (App. G) ----------------------------------------------------
# G-Eval publishes one prompt per dimension (prompts/summeval/{coh,con,flu,rel}_detailed.txt at the
# preset's revision): the same frame, its own criterion, steps and closing form line, and fluency on
# 1-3 where the others are on 1-5. As for coherence, the wording here is the project's own; the
# structure, the scale and the ending ("- Consistency:" with no separator) are G-Eval's.
GEVAL_DIMENSIONS: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "coherence": ("", "", ("1", "2", "3", "4", "5")),
    "consistency": (
        "Consistency (1-5) - whether the facts in the summary agree with the article. A consistent summary states only what the article supports and adds no invented facts.",
        "2. Read the summary and check each of its facts against the article.\n3. Give a consistency score from 1 (lowest) to 5 (highest) following the Evaluation Criteria.",
        ("1", "2", "3", "4", "5"),
    ),
    "fluency": (
        "Fluency (1-3) - the quality of the summary's sentences: grammar, spelling, punctuation, word choice and sentence structure.",
        "2. Read the summary and note its errors of grammar, spelling and word choice.\n3. Give a fluency score from 1 (lowest) to 3 (highest) following the Evaluation Criteria.",
        ("1", "2", "3"),
    ),
    "relevance": (
        "Relevance (1-5) - whether the summary keeps the article's important content. A relevant summary includes the main points and leaves out what does not matter.",
        "2. Read the summary and check that it covers those points and nothing redundant.\n3. Give a relevance score from 1 (lowest) to 5 (highest) following the Evaluation Criteria.",
        ("1", "2", "3", "4", "5"),
    ),
}


def geval_template(coherence: str, dimension: str) -> str:
    """G-Eval's prompt for ``dimension``, from its coherence prompt: the criterion, the last two steps
    and the closing form line replaced (the frame and both placeholders unchanged)."""
    if dimension == "coherence":
        return coherence
    criterion, steps, _ = GEVAL_DIMENSIONS[dimension]
    lines = coherence.split("\n")
    out = []
    for line in lines:
        if line.startswith("Coherence (1-5)"):
            out.append(criterion)
        elif line.startswith("2. "):
            out.append(steps)
        elif line.startswith("3. "):
            continue
        elif line == "- Coherence:":
            out.append(f"- {dimension.capitalize()}:")
        else:
            out.append(line)
    return "\n".join(out)


def geval_dimension(dimension: str) -> ScorerPreset:
    """The geval preset for one SummEval dimension: its prompt, scale and target grade (App. G)."""
    if dimension not in GEVAL_DIMENSIONS:
        raise UserError(f"unknown G-Eval dimension '{dimension}' (choose from {', '.join(GEVAL_DIMENSIONS)})")
    base = SCORERS["geval"]
    options = GEVAL_DIMENSIONS[dimension][2]
    label = dimension.capitalize()
    return replace(
        base,
        name=f"geval:{dimension}",
        title=f"G-Eval {dimension} (1-{options[-1]})",
        options=options,
        parser_note=f"probability-weighted grade over the first tokens of 1-{options[-1]} after '- {label}:'",
        repair=Repair("separator", " ", options, f"a space supplied after '- {label}:', bare grades"),
        target=_num(dimension),
        dimension=dimension,
    )


# -- the paper's data filled into the presets (Table 11's RACE-H items, App. G's SummEval) ---------
def _item_block(rec: Mapping[str, Any]) -> str:
    letters = LETTERS[: len(rec["choices"])]
    lines = [str(rec["question"]), *[f"{L}: {c}" for L, c in zip(letters, rec["choices"])], f"Answer with exactly one of: {', '.join(letters)}."]
    return "\n".join(lines)


def records_from_data(preset: ScorerPreset, records: Sequence[Mapping[str, Any]]) -> list[dict[str, object]]:
    """The data layer's records as the preset's own fields.

    SummEval (App. G): the article and one system summary, ``doc_id`` the article, the dimension's
    expert grade. RACE-H (Table 11, App. F; inferred where App. F names no field): G-Eval reads the
    passage as the document and the item block as the summary; Zhuang the question as the query
    and the passage as the document; AlpacaEval the item block as the instruction and the gold and
    the next choice as the two outputs; Kadavath the item's stem without its lettered choices or
    instruction (App. F) and the gold choice as the proposed answer."""
    out = []
    for r in records:
        if "summary" in r and "source" in r:
            if preset.fields != ("document", "summary"):
                raise UserError(f"preset '{preset.name}' cannot read SummEval records: scan geval or geval:DIMENSION (App. G)")
            doc = str(r["id"]).rpartition(":")[0] or str(r.get("source_index"))
            out.append({"id": str(r["id"]), "doc_id": doc, "document": r["source"], "summary": r["summary"], **{d: r.get(d) for d in GEVAL_DIMENSIONS}})
            continue
        if not {"passage", "question", "choices", "answer"} <= set(r):
            raise UserError(f"record {r.get('id')}: the scan reads RACE-style (passage, question, choices, answer) or SummEval records")
        choices = list(r["choices"])
        gold = LETTERS.index(r["answer"])
        block = _item_block(r)
        fields = {
            "document": r["passage"], "summary": block, "query": r["question"], "instruction": block,
            "output_1": choices[gold], "output_2": choices[(gold + 1) % len(choices)], "question": r["question"], "answer": choices[gold],
        }
        missing = [f for f in preset.fields if f not in fields] if preset.expand is None else ["its rotations"]
        if missing:
            raise UserError(f"preset '{preset.name}' cannot read RACE-H items (no field for {', '.join(missing)}): scan geval, relevance, alpacaeval, kadavath or lmpolygraph")
        out.append({"id": str(r["id"]), "doc_id": str(r["id"]), **{f: fields[f] for f in preset.fields}})
    return out
