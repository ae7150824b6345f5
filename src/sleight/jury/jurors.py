"""A juror: one judge model and the way it votes, casting votes as they complete.

A server juror keeps up to its client's ``concurrency`` requests in flight (whatever the commit
batch) and yields each vote as it arrives; a local juror votes a batch at a time, by label slots
(the default) or by free text. Callers commit what they receive whenever they like, so a crash loses
only the votes not yet written.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Any, Protocol

from sleight.backends.chat import LocalChat, Messages, OpenAIChat
from sleight.errors import UserError
from sleight.jury.ballot import Ballot
from sleight.jury.cast import Cast, FormatMemo, ask_schema, ask_text, text_casts_local
from sleight.jury.rules import SLEIGHT, JuryRules
from sleight.jury.slots import slot_casts

VOTE_MODES: tuple[str, ...] = ("auto", "slots", "schema", "text")


class Juror(Protocol):
    name: str
    mode: str

    def cast(self, conversations: Sequence[Messages], ballot: Ballot, *, max_tokens: int) -> Iterator[tuple[int, Cast]]:
        """``(index, vote)`` for every conversation, in the order the votes complete."""


class ServerJuror:
    """An OpenAI-compatible endpoint voting by ``response_format`` schema or by text."""

    def __init__(self, client: OpenAIChat, mode: str, retry: bool = True) -> None:
        self.client, self.mode, self.name, self.retry = client, mode, client.name, retry
        self.memo = FormatMemo()

    def one(self, msgs: Messages, ballot: Ballot, max_tokens: int) -> Cast:
        if self.mode == "schema":
            return ask_schema(self.client, msgs, ballot, max_tokens=max_tokens, memo=self.memo, retry=self.retry)
        return ask_text(self.client, msgs, ballot, max_tokens=max_tokens, retry=self.retry)

    def cast(self, conversations: Sequence[Messages], ballot: Ballot, *, max_tokens: int) -> Iterator[tuple[int, Cast]]:
        """At most ``concurrency`` votes in flight; a new one starts as soon as one completes."""
        todo = iter(enumerate(conversations))
        with ThreadPoolExecutor(max_workers=self.client.concurrency) as pool:
            running: dict[Future[Cast], int] = {}

            def top_up() -> None:
                while len(running) < self.client.concurrency:
                    nxt = next(todo, None)
                    if nxt is None:
                        return
                    running[pool.submit(self.one, nxt[1], ballot, max_tokens)] = nxt[0]

            top_up()
            while running:
                done, _ = wait(list(running), return_when=FIRST_COMPLETED)
                for fut in done:
                    yield running.pop(fut), fut.result()
                top_up()


class LocalJuror:
    """A local model voting a batch at a time, by label slots or by greedy text. ``judge_text``
    ``"vllm"`` reads its text replies as the study read its judges' (:mod:`sleight.jury.study_text`)."""

    def __init__(self, chat: LocalChat, mode: str, batch: int = 16, retry: bool = True, judge_text: str = "decoded") -> None:
        self.chat, self.mode, self.name, self.batch, self.retry = chat, mode, chat.name, max(1, batch), retry
        self.text_chat: Any = chat
        if judge_text == "vllm":
            from sleight.jury.study_text import VLLMTextChat

            self.text_chat = VLLMTextChat(chat)

    def cast(self, conversations: Sequence[Messages], ballot: Ballot, *, max_tokens: int) -> Iterator[tuple[int, Cast]]:
        for lo in range(0, len(conversations), self.batch):
            chunk = conversations[lo : lo + self.batch]
            if self.mode == "slots":
                casts = slot_casts(self.chat.model, chunk, ballot)
            else:
                casts = text_casts_local(self.text_chat, chunk, ballot, max_tokens=max_tokens, retry=self.retry)
            for j, c in enumerate(casts):
                yield lo + j, c


class ChatJuror:
    """Any other :class:`~sleight.backends.chat.ChatModel` (``chat_many`` only): text votes by batch."""

    def __init__(self, chat: Any, batch: int = 16, retry: bool = True) -> None:
        self.chat, self.mode, self.name, self.batch, self.retry = chat, "text", getattr(chat, "name", "juror"), max(1, batch), retry

    def cast(self, conversations: Sequence[Messages], ballot: Ballot, *, max_tokens: int) -> Iterator[tuple[int, Cast]]:
        for lo in range(0, len(conversations), self.batch):
            chunk = conversations[lo : lo + self.batch]
            for j, c in enumerate(text_casts_local(self.chat, chunk, ballot, max_tokens=max_tokens, retry=self.retry)):
                yield lo + j, c


def resolve_mode(mode: str, local: bool, rules: JuryRules = SLEIGHT) -> str:
    """``auto`` is what ``rules`` ask for: under sleight's, label slots on a local model and the
    schema path on a server; under the study's, free text on both."""
    if mode not in VOTE_MODES:
        raise UserError(f"unknown --vote '{mode}' (choose from {', '.join(VOTE_MODES)})")
    if mode == "auto":
        return rules.vote_local if local else rules.vote_server
    if mode == "slots" and not local:
        raise UserError("--vote slots reads a local model's own next-token distribution; a server juror votes by schema or text")
    if mode == "schema" and local:
        raise UserError("--vote schema is for server jurors (openai:...); a local juror votes by slots or text")
    return mode


def make_juror(chat: Any, mode: str = "auto", *, batch: int = 16, rules: JuryRules = SLEIGHT) -> Juror:
    """The juror for a loaded judge: a server client, a local model, or any ``chat_many`` model,
    voting, retrying and reading a local model's text as ``rules`` say (``mode`` other than
    ``auto`` overrides the vote)."""
    if isinstance(chat, OpenAIChat):
        return ServerJuror(chat, resolve_mode(mode, local=False, rules=rules), retry=rules.retry)
    if isinstance(chat, LocalChat):
        return LocalJuror(chat, resolve_mode(mode, local=True, rules=rules), batch, retry=rules.retry, judge_text=rules.judge_text)
    if mode not in ("auto", "text"):
        raise UserError(f"--vote {mode} is not available for judge {getattr(chat, 'name', chat)!r}; use --vote text")
    return ChatJuror(chat, batch, retry=rules.retry)


def parse_jury(spec: str) -> list[str]:
    """``J1,J2,J3`` -> juror specs, refusing empty and repeated names (votes are keyed by juror)."""
    jurors = [j.strip() for j in spec.split(",")]
    if not spec.strip() or any(not j for j in jurors):
        raise UserError(f"bad --jury '{spec}': give one or more comma-separated judge specs")
    seen = set()
    for j in jurors:
        if j in seen:
            raise UserError(f"judge '{j}' appears twice in --jury; each juror must be a different spec")
        seen.add(j)
    return jurors
