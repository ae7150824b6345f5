"""How a jury's replies become verdicts: the study's rules, or sleight's stricter reading.

Two rule sets, chosen by ``--conventions`` (the run's own by default):

``study`` -- the Sleight of Word study's jury, as its code ran it (fractalego/Sleight-of-Word at
commit 08d2bae): every juror writes a free-text reply (``scripts/panel_judge.py`` lines 102-103:
greedy, ``max_tokens=256``; no guided decoding), which is read once, with no retry, from the first
``{`` to the last ``}`` with Python truthiness for each label (``src/awareness/judge.py`` lines
55-81); an unparsable reply stores ``None`` labels (``panel_judge.py`` lines 121-124), and the
combination counts only true votes -- a label is true when at least two jurors say true
(``scripts/panel_combine.py`` lines 71-75), so an unparsable reply reads as false. A trial is
combined only when every juror has a vote for it (``panel_combine.py`` line 70). The text on both
sides is the study's too: a judge reads the reply as the subject's tokenizer decodes all of its
tokens with the call's defaults, special tokens kept, so a reply the model ended ends with its
end-of-turn marker (``src/awareness/runner.py`` line 391: ``tokenizer.decode(st.assistant_ids)``,
the tokenizer of line 356, ``llm.get_tokenizer()``; read by ``scripts/panel_judge.py`` lines 59
and 115-118), and a judge's reply is read as vLLM's ``.text`` (``panel_judge.py`` line 123: the
default ``SamplingParams`` of line 103 skip special tokens, and the token that stopped the reply
is not in the text).

``sleight`` -- the project's reading (SPEC §3.4): label slots on a local juror, a JSON schema on a
server, strict values (``"false"`` is false), an unparsable reply asked once more and then recorded
as an abstention, and a verdict only from two agreeing non-abstaining votes that outnumber the rest;
without one the label is undecided and the trial stays in the denominators as such.

Pure: no I/O, no models.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sleight.errors import UserError
from sleight.jury.verdict import majority


@dataclass(frozen=True)
class JuryRules:
    """One way of asking a jury and reading its answers."""

    name: str
    vote_local: str  # what ``--vote auto`` means for a local juror
    vote_server: str  # ... and for a server juror
    max_tokens: int  # the reply budget per vote
    retry: bool  # an unparsable reply is asked once more
    reading: str  # how a reply's JSON is read: "study" (its extraction, truthiness) or "strict"
    unparsable_is_false: bool  # an unparsable reply counts as a false vote (else an abstention)
    reaction: str = "reply"  # the reply text a judge reads: "reply" (the stored text) or "tokens" (the study's decode of every token)
    judge_text: str = "decoded"  # a local judge's reply: "decoded" (special tokens kept) or "vllm" (vLLM's ``.text``)

    def verdict(self, votes: Sequence[bool | None], jury_size: int, complete: bool = True) -> bool | None:
        """The jury's value for one label. ``votes``: one per juror that answered (``None`` for an
        unparsable reply); ``complete``: every juror of the jury answered (a vote that is not stored,
        or was lost to a transport error, is not an answer).

        Study: true when at least two jurors (the one juror of a jury of one) say true, else false,
        and ``None`` until every juror has answered. Sleight: :func:`sleight.jury.verdict.majority`
        of the valid votes.
        """
        if not self.unparsable_is_false:
            return majority(list(votes), jury_size)
        if not complete:
            return None
        return sum(v is True for v in votes) >= min(2, max(jury_size, 1))


STUDY = JuryRules(
    "study", vote_local="text", vote_server="text", max_tokens=256, retry=False, reading="study", unparsable_is_false=True,
    reaction="tokens", judge_text="vllm",
)
SLEIGHT = JuryRules("sleight", vote_local="slots", vote_server="schema", max_tokens=200, retry=True, reading="strict", unparsable_is_false=False)
RULES: dict[str, JuryRules] = {r.name: r for r in (STUDY, SLEIGHT)}


def rules_for(conventions: str) -> JuryRules:
    """The rules of ``--conventions study|sleight``."""
    try:
        return RULES[conventions]
    except KeyError:
        raise UserError(f"unknown --conventions '{conventions}' (choose from {', '.join(RULES)})") from None
