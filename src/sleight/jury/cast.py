"""One juror's vote on one case, and the text and schema paths that cast it from chat replies.

The text path asks for the JSON, reads it the ballot's way, and retries an unparsable reply once
(with the bad reply and a nudge in the chat: a greedy judge asked the identical prompt would answer
the identical reply) unless told not to (``retry=False``: the study asked once). The schema path sends the ballot's JSON schema as ``response_format`` --
``json_schema`` (strict; OpenAI, vLLM) first, then ``json_object`` with ``schema`` (llama.cpp's
server) -- and falls back to the text path when the server refuses it (HTTP 400/422, or a
server error naming the format); every vote
records which path produced it. Where the server returns log-probs, P(true) of each label's value
token is kept as a soft vote.
"""

from __future__ import annotations

import datetime as dt
import re
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypedDict

import numpy as np

from sleight.backends.chat import FORMAT_WORDS, ChatReply, Messages, format_refused
from sleight.jury.ballot import Ballot

FORMATS: tuple[str, ...] = ("json_schema", "json_object")
TEXT = "text"
SCHEMA_REFUSED = "text (schema refused)"
REASON_MAX_CHARS = 100


class CastRecord(TypedDict):
    """The columns every stored vote carries, whatever the instrument (:meth:`Cast.record`)."""

    reason: str | None
    abstained: bool
    attempts: int
    raw_reply: str
    first_reply: str | None
    error: str | None
    latency_s: float
    judged_at: str
    vote_path: str
    finish_reason: str | None
    reasoning: str | None


@dataclass
class Cast:
    """One juror's vote on one case. ``values`` is ``None`` when the juror abstained.

    ``soft[f]`` are the juror's probabilities over field ``f``'s values (label slots, or a
    server's log-probs), ``mass[f]`` the two options' share of the next-token mass at ``f``'s slot.
    """

    values: dict[str, bool | str] | None
    path: str
    reason: str | None = None
    attempts: int = 1
    raw_reply: str = ""
    first_reply: str | None = None
    error: str | None = None
    latency_s: float = 0.0
    finish_reason: str | None = None
    reasoning: str | None = None
    soft: dict[str, tuple[float, ...] | None] = field(default_factory=dict)
    mass: dict[str, float | None] = field(default_factory=dict)

    @property
    def abstained(self) -> bool:
        return self.values is None

    def record(self) -> CastRecord:
        """The columns every stored vote carries, whatever the instrument (pure apart from the clock)."""
        return {
            "reason": self.reason,
            "abstained": self.abstained,
            "attempts": self.attempts,
            "raw_reply": self.raw_reply,
            "first_reply": self.first_reply,
            "error": self.error,
            "latency_s": float(self.latency_s),
            "judged_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "vote_path": self.path,
            "finish_reason": self.finish_reason,
            "reasoning": self.reasoning,
        }


def retry_messages(first: Messages, bad_reply: str, nudge: str) -> list[dict[str, str]]:
    """The one retry after an unparsable reply: the same chat, the bad reply, and a nudge."""
    return [dict(m) for m in first] + [{"role": "assistant", "content": bad_reply}, {"role": "user", "content": nudge}]


def text_cast(ballot: Ballot, first: ChatReply, second: ChatReply | None, path: str = TEXT) -> Cast:
    """The vote read from a reply (and from the retry's reply, when there was one); pure."""
    final = second if second is not None else first
    vote = ballot.parse(final.text) if not final.error else None
    return Cast(
        values=None if vote is None else {n: vote[n] for n in ballot.names},
        path=path,
        reason=None if vote is None else str(vote[ballot.reason]),
        attempts=1 if second is None else 2,
        raw_reply=final.text,
        first_reply=first.text if second is not None else None,
        error=final.error,
        latency_s=float(first.latency_s + (second.latency_s if second is not None else 0.0)),
        finish_reason=final.finish_reason,
        reasoning=final.reasoning,
        soft=soft_from_logprobs(final.logprobs, ballot) if vote is not None and final.logprobs else {},
    )


def needs_retry(ballot: Ballot, reply: ChatReply) -> bool:
    return reply.error is None and ballot.parse(reply.text) is None


# -- the schema path --------------------------------------------------------------------------------
def response_format(kind: str, ballot: Ballot) -> dict[str, object]:
    """The ``response_format`` of one kind for the ballot's schema."""
    if kind == "json_schema":
        return {"type": "json_schema", "json_schema": {"name": ballot.name, "strict": True, "schema": ballot.schema()}}
    if kind == "json_object":  # llama.cpp's grammar honours maxLength; strict json_schema may not
        return {"type": "json_object", "schema": ballot.schema(reason_max_chars=REASON_MAX_CHARS)}
    raise ValueError(f"unknown response_format kind {kind!r}")


class FormatMemo:
    """Which ``response_format`` kinds one server refused (shared by that juror's threads)."""

    def __init__(self) -> None:
        self.refused: set[str] = set()
        self.lock = threading.Lock()

    def kinds(self) -> list[str]:
        with self.lock:
            return [k for k in FORMATS if k not in self.refused]

    def refuse(self, kind: str, reply: ChatReply) -> None:
        """Remember a refusal that names the format (a 400 for another reason, such as a prompt
        too long, says nothing about the server's support, so only this vote falls back)."""
        if FORMAT_WORDS.search(reply.error or ""):
            with self.lock:
                self.refused.add(kind)


def ask_schema(client: Any, messages: Messages, ballot: Ballot, *, max_tokens: int, memo: FormatMemo, retry: bool = True) -> Cast:
    """One vote by the schema path, falling back to the text path when every format is refused."""
    spent = 0.0
    for kind in memo.kinds():
        rf = response_format(kind, ballot)
        first = client.chat(messages, max_tokens=max_tokens, response_format=rf, logprobs=True)
        spent += first.latency_s
        if format_refused(first.status, first.error):
            memo.refuse(kind, first)
            continue
        second = None
        if retry and needs_retry(ballot, first):  # e.g. the object was cut off by the token budget
            second = client.chat(retry_messages(messages, first.text, ballot.nudge()), max_tokens=max_tokens, response_format=rf, logprobs=True)
        cast = text_cast(ballot, first, second, path=f"schema:{kind}")
        cast.latency_s += spent - first.latency_s
        return cast
    cast = ask_text(client, messages, ballot, max_tokens=max_tokens, path=SCHEMA_REFUSED, retry=retry)  # refused now or earlier
    cast.latency_s += spent
    return cast


def ask_text(client: Any, messages: Messages, ballot: Ballot, *, max_tokens: int, path: str = TEXT, retry: bool = True) -> Cast:
    """One vote by the text path on a server: ask, and (``retry``) ask an unparsable reply once more."""
    first = client.chat(messages, max_tokens=max_tokens)
    second = None
    if retry and needs_retry(ballot, first):
        second = client.chat(retry_messages(messages, first.text, ballot.nudge()), max_tokens=max_tokens)
    return text_cast(ballot, first, second, path=path)


def text_casts_local(chat: Any, conversations: Sequence[Messages], ballot: Ballot, *, max_tokens: int, retry: bool = True) -> list[Cast]:
    """Text votes from a local model for a batch: ask all, (``retry``) ask the unparsable ones again together."""
    firsts = chat.chat_many(conversations, max_tokens=max_tokens)
    redo = [i for i, r in enumerate(firsts) if needs_retry(ballot, r)] if retry else []
    seconds: dict[int, ChatReply] = {}
    if redo:
        again = chat.chat_many([retry_messages(conversations[i], firsts[i].text, ballot.nudge()) for i in redo], max_tokens=max_tokens)
        seconds = dict(zip(redo, again))
    return [text_cast(ballot, firsts[i], seconds.get(i)) for i in range(len(conversations))]


# -- soft votes from a server's log-probs --------------------------------------------------------------
def soft_from_logprobs(entries: Sequence[Mapping[str, Any]] | None, ballot: Ballot) -> dict[str, tuple[float, ...] | None]:
    """P(true), P(false) of each boolean field, read at the token that starts its value (pure).

    The served tokens are joined to find where ``"<field>":`` ends; at the token covering the value's
    first character, the chosen token and its ``top_logprobs`` are split into those spelling the
    start of ``true`` and of ``false`` (after whatever part of that token precedes the value). A side
    absent from the top-k counts as no mass; a field whose two sides are both absent is ``None``.
    """
    if not entries:
        return {}
    tokens = [str(e.get("token", "")) for e in entries]
    starts = np.cumsum([0] + [len(t) for t in tokens])
    text = "".join(tokens)
    out: dict[str, tuple[float, ...] | None] = {}
    for f in ballot.fields:
        if not f.boolean:
            continue
        m = re.search(rf'"{re.escape(f.name)}"\s*:\s*', text)
        if m is None:
            out[f.name] = None
            continue
        at = m.end()
        i = int(np.searchsorted(starts, at, side="right")) - 1
        if i >= len(entries):
            out[f.name] = None
            continue
        before = text[starts[i] : at]
        entry = entries[i]
        alts = [(str(entry.get("token", "")), entry.get("logprob"))]
        alts += [(str(a.get("token", "")), a.get("logprob")) for a in entry.get("top_logprobs") or [] if isinstance(a, Mapping)]
        seen: dict[str, float] = {}
        for tok, lp in alts:
            if isinstance(lp, (int, float)) and tok not in seen:
                seen[tok] = float(lp)
        p = {"true": 0.0, "false": 0.0}
        for tok, lp in seen.items():
            if not tok.startswith(before):
                continue
            rest = tok[len(before) :].strip().lower()
            for word in p:
                if rest and (word.startswith(rest) or rest.startswith(word)):
                    p[word] += float(np.exp(lp))
        total = p["true"] + p["false"]
        out[f.name] = (p["true"] / total, p["false"] / total) if total > 0 else None
    return out
