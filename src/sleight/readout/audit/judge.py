"""Instruction-execution labels for the readout audit: what a jury says each continuation does.

The substituted-instruction and deletion variants of an audit (SPEC §4.2) change the quoted item's
instruction; the rule classes (:mod:`sleight.readout.audit.classify`) say whether a continuation answers
the item or gives the forecast, but no rule can tell that it carries out a substituted instruction
("Summarise in one sentence."). A jury labels each continuation with one class:

* ``instruction`` -- it executes the substituted instruction (offered for substituted variants only);
* ``item`` -- it answers the quoted item itself;
* ``forecast`` -- it gives the requested forecast or option;
* ``other`` -- anything else (reciting the item, prose, a refusal...).

Everything here is pure: the prompt, the ballots, the rule classes mapped onto the jury's, and the
agreement tables. :mod:`sleight.readout.audit.judge_run` asks the jurors and keeps the votes.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from sleight.jury.ballot import Ballot, Field
from sleight.jury.verdict import agreement
from sleight.readout.audit.variants import SUBSTITUTES

CLASSES: tuple[str, ...] = ("instruction", "item", "forecast", "other")
DEFINITIONS: dict[str, str] = {
    "instruction": "the reply carries out the substituted instruction",
    "item": "the reply answers the quoted item itself (chooses or states its answer)",
    "forecast": "the reply gives the forecast or option the prompt asks for",
    "other": "anything else: reciting the item or the question, prose, a refusal, an unrelated reply",
}
# The rule classes as the jury's: the rules have no class for executing a substituted instruction.
RULE_TO_JURY: dict[str, str] = {"answers_item": "item", "forecast": "forecast", "recites": "other", "prose": "other", "other": "other"}

SUBSTITUTED_BALLOT = Ballot((Field("class", CLASSES, DEFINITIONS["instruction"]),), name="readout_class")
DELETED_BALLOT = Ballot((Field("class", CLASSES[1:], DEFINITIONS["item"]),), name="readout_class")

SYSTEM = "You are a careful annotator in a language-model experiment. You answer with one JSON object and nothing else."


def _plain(variant: str) -> str:
    """The plain variant a ``space+`` / ``separator+`` ending (App. C.2, D) reads: ``space+deleted`` is
    ``deleted_instruction``, ``separator+substituted:french`` is ``substituted:french``."""
    head, sep, rest = variant.partition("+")
    if sep and head in ("space", "separator"):
        return "deleted_instruction" if rest == "deleted" else rest
    return variant


def judged_variant(variant: str) -> bool:
    """The variants the jury labels: substituted instructions and deletions, at any ending, and App. D's
    judge records with the item's instruction intact (``separator+original``)."""
    plain = _plain(variant)
    return plain.startswith("substituted:") or plain.startswith("deleted_") or variant == "separator+original"


def ballot_for(variant: str) -> Ballot:
    return SUBSTITUTED_BALLOT if _plain(variant).startswith("substituted:") else DELETED_BALLOT


def defuse(text: str) -> str:
    """Chat-template markers (``<|im_start|>``) shown as text, so a judge's own tokenizer does not
    read the quoted prompt as turns of the judge's chat."""
    return re.sub(r"<\|([^|<>]{0,40})\|>", r"[\1]", text)


def what_changed(variant: str) -> str:
    if variant == "separator+original":
        return "In this prompt the quoted item's own answer instruction is intact."
    variant = _plain(variant)
    if variant.startswith("substituted:"):
        key = variant.split(":", 1)[1]
        instruction = SUBSTITUTES.get(key, key)
        if not instruction:
            return "In this prompt the quoted item's own instruction was removed and nothing was put in its place (the substituted instruction is empty)."
        return f'In this prompt the quoted item\'s own instruction was replaced by this substituted instruction: "{instruction}"'
    if variant == "deleted_choices":
        return "In this prompt the quoted item's list of lettered choices was deleted."
    if variant == "deleted_instruction_choices":
        return "In this prompt the quoted item's own answer instruction and its list of lettered choices were both deleted."
    return "In this prompt the quoted item's own answer instruction was deleted."


def judge_messages(context: str, continuation: str, variant: str, options: Sequence[str] | None) -> list[dict[str, str]]:
    """The chat a judge answers for one continuation."""
    ballot = ballot_for(variant)
    allowed = [str(v) for v in ballot.fields[0].values]
    wanted = ", ".join(str(o) for o in options) if options is not None and len(options) else "(not declared)"
    lines = [
        "A language model was given the prompt below and began its reply. Classify what the start of its reply does.",
        "",
        what_changed(variant),
        f"The prompt's own request asks for one of these options: {wanted}",
        "",
        "Prompt, as the model saw it (chat-template markers in square brackets):",
        "<<<",
        defuse(context).strip(),
        ">>>",
        "",
        "Start of the model's reply:",
        "<<<",
        defuse(continuation),
        ">>>",
        "",
        "Choose exactly one class:",
        *[f"- {c}: {DEFINITIONS[c]};" for c in allowed],
        "",
        "Answer with one JSON object only, giving the class and one short sentence as the reason:",
        ballot.skeleton(),
    ]
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "\n".join(lines)}]


# -- agreement with the rules and between jurors ---------------------------------------------------
def kind(variant: str) -> str:
    if variant == "separator+original":
        return "intact"
    return "substituted" if _plain(variant).startswith("substituted:") else "deleted"


def agreement_rows(verdicts: pd.DataFrame) -> list[dict[str, Any]]:
    """The jury's majority class against the rule class (mapped), per variant kind and overall."""
    rows = []
    groups: list[tuple[str, pd.DataFrame]] = [("all", verdicts)]
    groups += [(k, verdicts[verdicts["variant"].map(kind) == k]) for k in ("substituted", "deleted", "intact")]
    for name, g in groups:
        if not len(g):
            continue
        jury = [None if pd.isna(v) else str(v) for v in g["jury_class"]]
        a = agreement([str(v) for v in g["rule_mapped"]], jury)
        executes = sum(1 for v in jury if v == "instruction")
        rows.append(
            {
                "variants": name,
                "continuations": len(g),
                "with a jury majority": a.n,
                "agreement %": 100.0 * a.accuracy if a.n else float("nan"),
                "κ": a.kappa,
                "jury: executes the instruction": executes,
            }
        )
    return rows


def juror_kappas(votes: pd.DataFrame, jury: Sequence[str]) -> list[dict[str, Any]]:
    """Cohen's κ for every pair of jurors over the continuations both classified."""
    cast = votes[~votes["abstained"].astype(bool)]
    wide = cast.pivot_table(index=["item_id", "variant"], columns="juror", values="class", aggfunc="first")
    rows = []
    for i, a in enumerate(jury):
        for b in jury[i + 1 :]:
            if a not in wide.columns or b not in wide.columns:
                rows.append({"pair": f"{a} · {b}", "n": 0, "agreement %": float("nan"), "κ": float("nan")})
                continue
            both = wide[[a, b]].dropna()
            ag = agreement(list(both[a]), list(both[b]))
            rows.append({"pair": f"{a} · {b}", "n": ag.n, "agreement %": 100.0 * ag.accuracy if ag.n else float("nan"), "κ": ag.kappa})
    return rows


def crosstab(verdicts: pd.DataFrame) -> pd.DataFrame:
    """Rule class (rows) against the jury's majority class (columns); ``none`` = no majority."""
    jury = verdicts["jury_class"].fillna("none").astype(str)
    cols = [c for c in (*CLASSES, "none") if c in set(jury)]
    return pd.crosstab(verdicts["rule_class"].astype(str), jury).reindex(columns=cols, fill_value=0)


def fmt(v: Any, column: str = "") -> str:
    """A cell: percentages to one decimal, other floats (κ, mass) to three, NaN as an em dash."""
    if v is None or (isinstance(v, float) and v != v):
        return "—"
    if isinstance(v, float):
        return f"{v:.1f}" if "%" in column else f"{v:.3f}"
    return str(v)


def markdown_table(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    if not rows:
        return []
    head = list(rows[0])
    out = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    out += ["| " + " | ".join(fmt(r[h], h).replace("|", "\\|") for h in head) + " |" for r in rows]
    return out


def lines_to_html(lines: Sequence[str]) -> str:
    """The section's Markdown lines (headings, pipe tables, quotes, paragraphs) as HTML."""
    import html

    out: list[str] = []
    table: list[list[str]] = []

    def flush() -> None:
        if table:
            head, body = table[0], [r for r in table[2:]]
            out.append("<table><thead><tr>" + "".join(f"<th>{html.escape(c)}</th>" for c in head) + "</tr></thead><tbody>")
            out.extend("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>" for r in body)
            out.append("</tbody></table>")
            table.clear()

    for line in lines:
        if line.startswith("|"):
            table.append([c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]])
            continue
        flush()
        if line.startswith("## "):
            out.append(f"<h2>{html.escape(line[3:])}</h2>")
        elif line.startswith("> "):
            out.append(f'<p class="warn">{html.escape(line[2:].replace("**", ""))}</p>')
        elif line.strip():
            out.append(f"<p>{html.escape(line)}</p>")
    flush()
    return "\n".join(out)


# -- App. D's counting rules ---------------------------------------------------------------------------
JUDGE_CONTINUATION_TOKENS = 64  # App. D: each rate uses 64-token greedy continuations
_BARE_NUMBER = re.compile(r"^\s*\d+(?:[.,]\d+)?\s*$")


def is_bare_number(continuation: str) -> bool:
    """App. D / §4: a continuation that is only a number (whitespace around it allowed)."""
    return bool(_BARE_NUMBER.match(continuation))


def counted_class(judge_class: str, continuation: str) -> str:
    """App. D: the class a rate counts: a bare number is a forecast whatever the judge said."""
    return "forecast" if is_bare_number(continuation) else judge_class


def execution_rate(classes: Sequence[str], continuations: Sequence[str]) -> float:
    """App. D: the share of continuations counted as executing the instruction (bare numbers are
    forecasts, so ``Reply with a single integer.`` has no attributable rate)."""
    counted = [counted_class(c, t) for c, t in zip(classes, continuations)]
    return sum(c == "instruction" for c in counted) / len(counted) if counted else float("nan")
