"""The one interface every instrument talks to, and the records it returns.

The shape follows lm-evaluation-harness's ``LM`` split of *context* and *continuation*:
a context is rendered once with the model's own chat template, continuations are token ids
appended to it. Engines (``hf``, ``vllm``) implement :class:`LanguageModel`; the instruments
never import an engine directly.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol, TypedDict, runtime_checkable

import numpy as np

from sleight.errors import UserError


class LoadRecord(TypedDict, total=False):
    """The load settings that change a run's records beyond model, engine and dtype, as
    :meth:`~sleight.backends.spec.ModelSpec.load_record` gives them: a key is there only where the
    load set it, so a plain load records ``{}``."""

    revision: str
    quantization: str
    load_format: str
    scorer: str  # vllm only
    engine_args: dict[str, object]


@dataclass(frozen=True)
class ModelInfo:
    """What every record names about the model that produced it."""

    spec: str  # what the user asked for (name, path or hub id)
    model_id: str  # resolved id (hub id, folder or GGUF file name)
    revision: str  # file hash (GGUF sha256) or hub revision, "" when unknown
    chat_template_sha256: str
    tokenizer: str
    engine: str
    engine_version: str
    dtype: str
    device: str
    batch_size: int
    threads: int = 0  # torch CPU threads the engine ran with (0: not applicable or unknown)
    chat_template_kwargs: dict[str, object] = field(default_factory=dict)  # template variables every render applied
    load: LoadRecord = field(default_factory=LoadRecord)  # ModelSpec.load_record(): revision, quantization, ... as loaded

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def sha256_text(text: str | None) -> str:
    """Hash of a chat template (or any text); '' when there is none."""
    return hashlib.sha256(text.encode()).hexdigest() if text else ""


@dataclass(frozen=True)
class Rendered:
    """A chat after the model's template: the exact text and the ids the model sees."""

    text: str
    ids: list[int]


@dataclass(frozen=True)
class Edit:
    """What a decoding hook asks for instead of the token the model just proposed.

    ``retract`` already accepted tokens are withdrawn (their positions are masked out of the KV
    cache, never recomputed), then ``force`` is appended token by token, each recorded with the
    model's own log-probability for it at the position where it lands. The proposed token is
    discarded. Tokens past the budget are dropped, so the budget is never exceeded.
    """

    force: tuple[int, ...]
    retract: int = 0


@runtime_checkable
class Hook(Protocol):
    """Called for every model-chosen token before it is accepted.

    ``output`` is the row's accepted tokens so far; ``proposed`` is the model's greedy choice,
    an end-of-sequence id when the model wants to stop, or ``None`` when the budget is spent
    (the reply is about to end). Return an :class:`Edit`, or ``None`` to accept.
    """

    def __call__(self, row: int, output: Sequence[int], proposed: int | None) -> Edit | None: ...


HookFn = Callable[[int, Sequence[int], int | None], Edit | None]  # a plain function serves as a :class:`Hook`


@dataclass
class Generation:
    """One decoded row: per accepted token, the model's view of that position.

    All arrays are aligned with ``token_ids``. ``top_ids``/``top_logprobs`` are the k most probable
    tokens at that step (log-softmax over the whole vocabulary), ``entropy`` is the exact entropy of
    the full distribution in nats, ``logprobs`` the log-probability of the accepted token, which is
    the model's own even for a forced token.
    """

    token_ids: list[int]
    logprobs: np.ndarray
    top_ids: np.ndarray  # (n, k) int
    top_logprobs: np.ndarray  # (n, k) float32
    entropy: np.ndarray  # (n,) float32
    forced: np.ndarray  # (n,) bool
    finish_reason: str  # "stop" (end-of-sequence chosen) or "length" (budget spent)
    edits: list[int] = field(default_factory=list)  # output index of the first token of each edit
    end: EndStep | None = None  # "stop": the step that chose end-of-sequence, where the engine records it

    @property
    def surprisal(self) -> np.ndarray:
        return -self.logprobs

    @classmethod
    def from_scored(cls, sc: Scored, forced: np.ndarray, finish_reason: str) -> Generation:
        """A reply decided first and scored after (an engine without per-step records): the
        :class:`Scored` records, which carry the same fields, with the forced flags and the finish."""
        return cls(sc.token_ids, sc.logprobs, sc.top_ids, sc.top_logprobs, sc.entropy, forced, finish_reason)


@dataclass(frozen=True)
class EndStep:
    """The step at which a reply chose end-of-sequence (not one of its tokens): the id chosen and
    that position's records, so a caller that keeps the end-of-turn token needs no scoring pass."""

    token_id: int
    logprob: float
    top_ids: np.ndarray  # (k,)
    top_logprobs: np.ndarray  # (k,)
    entropy: float


@dataclass(frozen=True)
class NextToken:
    """What an engine reports about the next position after one sequence, computed on the device.

    ``logprobs`` are the log-probabilities of the token ids the caller asked about (aligned with
    them), ``top_ids``/``top_logprobs`` the k most probable tokens (most probable first; ``top_ids[0]``
    is the unrestricted argmax) and ``entropy`` the exact entropy of the full distribution in nats.
    Only these small arrays leave the device: no engine ships a whole vocabulary to Python for this.
    """

    logprobs: np.ndarray  # (len(asked),) float64
    top_ids: np.ndarray  # (k,) int64
    top_logprobs: np.ndarray  # (k,) float64
    entropy: float
    # Set only by :meth:`ListedReads.read_listed` on a server that lists its top-k alone: an asked
    # id it did not list has a NaN log-prob, and its log-prob is at most this (the k-th listed).
    bound: float | None = None


@dataclass
class Scored:
    """Teacher-forced records of one reply: per token, what the model thought at its position.

    The same fields, dtypes and meaning as :class:`Generation` (``top_ids[:, 0]`` is the argmax at
    each position), computed in one forward pass over the finished reply instead of during decoding.
    """

    token_ids: list[int]
    logprobs: np.ndarray  # (n,) float64
    top_ids: np.ndarray  # (n, k) int64
    top_logprobs: np.ndarray  # (n, k) float32
    entropy: np.ndarray  # (n,) float32

    @classmethod
    def empty(cls, k: int) -> Scored:
        return cls([], np.zeros(0), np.zeros((0, k), np.int64), np.zeros((0, k), np.float32), np.zeros(0, np.float32))


@dataclass(frozen=True)
class Completion:
    """What plain greedy generation returned for one prompt.

    ``token_ids`` never holds an end-of-sequence id; a stop token that ended it is kept as its last
    token. ``finish_reason``: ``"stop"`` (the model chose end-of-sequence), ``"length"`` (the token
    budget is spent) or ``"stop_token"`` (a stop token id or stop string was generated).
    ``records``: where the engine read them as it generated (vLLM's ``generate_scored``), each
    generated token's records, the end-of-sequence step's last when the model ended; else None.
    """

    token_ids: list[int]
    finish_reason: str
    records: Scored | None = None

    @property
    def decoded(self) -> int:
        """Decoding steps the reply took: its tokens, and the end-of-sequence step when the model ended it."""
        return len(self.token_ids) + (self.finish_reason == "stop")


@dataclass(frozen=True)
class Sample:
    """One sampled continuation: its tokens and the model's own (unwarped, temperature 1) log-prob
    of each, which sequence-level uncertainty estimators read. ``finish_reason`` as in
    :class:`Completion`; ``token_ids`` never hold an end-of-sequence id."""

    token_ids: list[int]
    logprobs: np.ndarray  # (n,) float64
    finish_reason: str


@dataclass(frozen=True)
class Sampling:
    """A sampler's settings, as transformers' ``generate`` and vLLM's ``SamplingParams`` read them:
    logits / ``temperature``, then the ``top_k`` most probable (0: no cut), then the smallest set
    holding ``top_p`` of the mass; end-of-sequence is barred for the first ``min_new_tokens``."""

    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    min_new_tokens: int = 0
    seed: int = 0


def until_budgets(prompts: Sequence[Sequence[int]], max_tokens: int | Sequence[int]) -> list[int]:
    """``generate_until``'s budget per prompt (one for all, or one each), the prompts checked non-empty."""
    if any(len(p) == 0 for p in prompts):
        raise ValueError("generate_until needs non-empty prompts")
    budgets = [int(max_tokens)] * len(prompts) if isinstance(max_tokens, int) else [int(m) for m in max_tokens]
    if len(budgets) != len(prompts):
        raise ValueError("generate_until needs one max_tokens per prompt (or one for all)")
    return budgets


def check_sampling(s: Sampling, n: int = 1, max_new_tokens: int = 1) -> None:
    """A setting no sampler can honour is one line naming it."""
    if not s.temperature > 0:
        raise UserError(f"sampling temperature must be positive, got {s.temperature} (top_k=1 is the greedy draw)")
    if s.top_k < 0:
        raise UserError(f"sampling top-k must be 0 (no cut) or positive, got {s.top_k}")
    if not 0 < s.top_p <= 1:
        raise UserError(f"sampling top-p must be in (0, 1], got {s.top_p}")
    if s.min_new_tokens < 0:
        raise UserError(f"sampling min_new_tokens must be >= 0, got {s.min_new_tokens}")
    if n < 1:
        raise UserError(f"sampling needs n >= 1 samples per prompt, got {n}")
    if max_new_tokens < 0:
        raise UserError(f"sampling needs max_new_tokens >= 0, got {max_new_tokens}")


def check_reads(seqs: Sequence[Sequence[int]], asked: Sequence[Sequence[int]]) -> None:
    """``read_next``'s arguments: one list of asked ids per sequence, every sequence non-empty."""
    if len(asked) != len(seqs):
        raise ValueError("read_next needs one list of asked ids per sequence")
    if any(len(s) == 0 for s in seqs):
        raise ValueError("read_next needs non-empty sequences")


def check_continuations(context: Sequence[int], continuations: Sequence[Sequence[int]]) -> None:
    """``continuation_logprobs``'s arguments: a non-empty context and non-empty continuations."""
    if not context:
        raise ValueError("continuation_logprobs needs a non-empty context")
    if any(len(c) == 0 for c in continuations):
        raise ValueError("continuation_logprobs got an empty continuation")


UNWARPED = Sampling()  # the model's own distribution at temperature 1, no cut: every sampler's default


class Rendering(Protocol):
    """A chat rendered by the rendering rule (:mod:`sleight.backends.tokens`): what every engine
    shares of :meth:`render_chat`, over the template rendering and the encoding it supplies."""

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` with no special tokens added."""

    def template_render(
        self, messages: Sequence[dict[str, str]], add_generation_prompt: bool, template_kwargs: Mapping[str, object] | None
    ) -> tuple[str, list[int] | None]:
        """The template's rendering of ``messages`` (its ``chat_template_kwargs``, ``template_kwargs``
        merged over them): its text, and its ids where the rendering gave them (None: the text's encoding)."""

    def render_chat(
        self,
        messages: Sequence[dict[str, str]],
        *,
        add_generation_prompt: bool = True,
        prefill: str | None = None,
        template_kwargs: Mapping[str, object] | None = None,
    ) -> Rendered:
        """Apply the model's chat template (with the generation prompt unless
        ``add_generation_prompt=False``; its ``chat_template_kwargs``, ``template_kwargs`` merged over
        them); ``prefill``, the answer stem, is appended as plain text after the generation prompt (the
        readout paper's rule, :mod:`sleight.backends.tokens`) and the ids encode the whole string."""
        if prefill is not None and not add_generation_prompt:
            raise ValueError("an answer stem follows the generation prompt: prefill needs add_generation_prompt=True")
        text, ids = self.template_render(messages, add_generation_prompt, template_kwargs)
        if prefill is not None:
            text += prefill  # the paper's rule: the stem as text after the generation prompt, byte for byte
            ids = None
        return Rendered(text=text, ids=self.encode(text) if ids is None else ids)


class Decoding(Protocol):
    """:class:`LanguageModel`'s decoding calls as every engine serves them: the arguments checked and
    the rows with nothing to decode answered here, so all engines refuse and answer them alike; the
    rows left are the engine's own (:meth:`until_rows`, :meth:`sample_rows`, :meth:`greedy_rows`)."""

    # -- what the engine supplies ---------------------------------------------------------------
    def until_rows(
        self, prompts: Sequence[Sequence[int]], budgets: Sequence[int], stop_token_ids: Sequence[int], stop: Sequence[str],
        progress: Callable[[int], None] | None,
    ) -> list[Completion]:  # fmt: skip
        """:meth:`generate_until` of non-empty prompts whose budgets are all positive."""

    def sample_rows(
        self, prompts: Sequence[Sequence[int]], max_new_tokens: int, n: int, sampling: Sampling, stop_token_ids: Sequence[int]
    ) -> list[list[Sample]]:
        """:meth:`sample` of non-empty prompts, the settings checked and the budget positive."""

    def greedy_rows(
        self, prompts: Sequence[Sequence[int]], max_new_tokens: int, hook: Hook | HookFn | None, forced: Sequence[Sequence[int]],
        top_k: int, progress: Callable[[int], None] | None,
    ) -> list[Generation]:  # fmt: skip
        """:meth:`greedy` of non-empty prompts (at least one), ``forced`` one list a prompt."""

    # -- the calls --------------------------------------------------------------------------------
    def generate_until(
        self,
        prompts: Sequence[Sequence[int]],
        max_tokens: int | Sequence[int],
        *,
        stop_token_ids: Sequence[int] = (),
        stop: Sequence[str] = (),
        progress: Callable[[int], None] | None = None,
    ) -> list[Completion]:
        """Plain greedy generation, batched, until end-of-sequence, the budget (``max_tokens``, one
        per prompt or one for all), a stop token id or a stop string (searched in the output text).
        A prompt with no budget stays empty; the others go to :meth:`until_rows` together."""
        budgets = until_budgets(prompts, max_tokens)
        result = [Completion([], "length") for _ in prompts]
        todo = [i for i, b in enumerate(budgets) if b > 0]
        for i, done in zip(todo, self.until_rows([prompts[i] for i in todo], [budgets[i] for i in todo], stop_token_ids, stop, progress)):
            result[i] = done
        return result

    def sample(
        self,
        prompts: Sequence[Sequence[int]],
        max_new_tokens: int,
        *,
        n: int = 1,
        sampling: Sampling = UNWARPED,
        stop_token_ids: Sequence[int] = (),
    ) -> list[list[Sample]]:
        """``n`` sampled continuations of each prompt (KV-cached, the prompt computed once), seeded
        by ``sampling.seed`` so a rerun draws the same tokens on the same engine and kernels. The
        settings are checked (:func:`check_sampling`); with no budget, ``n`` empty samples a prompt."""
        check_sampling(sampling, n, max_new_tokens)
        if any(len(p) == 0 for p in prompts):
            raise ValueError("sample needs non-empty prompts")
        if max_new_tokens == 0:
            return [[Sample([], np.zeros(0), "length") for _ in range(n)] for _ in prompts]
        return self.sample_rows(prompts, max_new_tokens, n, sampling, stop_token_ids)

    def greedy(
        self,
        prompts: Sequence[Sequence[int]],
        max_new_tokens: int,
        *,
        hook: Hook | HookFn | None = None,
        forced: Sequence[Sequence[int]] | None = None,
        top_k: int = 20,
        progress: Callable[[int], None] | None = None,
    ) -> list[Generation]:
        """Greedy decoding, batched, with a shared-prefix KV cache and per-step edits.

        ``forced[i]`` tokens are fed first to row ``i`` (recorded and marked forced), before the
        model decodes freely. ``progress`` is called with the number of tokens produced per step.
        No prompts, no rows; an empty prompt is refused.
        """
        if not prompts:
            return []
        if any(len(p) == 0 for p in prompts):
            raise ValueError("greedy needs non-empty prompts")
        return self.greedy_rows(prompts, max_new_tokens, hook, forced or [[] for _ in prompts], top_k, progress)


@runtime_checkable
class LanguageModel(Rendering, Decoding, Protocol):
    """A causal LM whose whole next-token distribution can be read.

    Instruments call :meth:`render_chat`, the reads below and the decoding calls; an engine supplies
    what :class:`Rendering` and :class:`Decoding` name as its own and inherits the rest from them."""

    info: ModelInfo

    @property
    def eos_ids(self) -> frozenset[int]: ...

    @property
    def vocab_size(self) -> int: ...

    def decode(self, ids: Sequence[int]) -> str:
        """Text of ``ids``, special tokens kept (so a rendered prompt round-trips)."""

    def token_text(self, token_id: int) -> str:
        """The surface string of one token (the vocabulary entry, byte-level markers resolved)."""

    def read_next(
        self, seqs: Sequence[Sequence[int]], asked: Sequence[Sequence[int]], *, top_k: int = 20
    ) -> list[NextToken]:
        """At the end of each sequence: log-probs of the ``asked[i]`` ids, the top-k and the entropy.

        The scored-position reading of every instrument goes through this (options, label slots,
        argmax), so an engine that cannot afford a full-vocabulary dump (vLLM) still serves it.
        """

    def continuation_logprobs(
        self, context: Sequence[int], continuations: Sequence[Sequence[int]]
    ) -> list[np.ndarray]:
        """Per-token log-probabilities of each continuation after ``context`` (one array each)."""

    def score_tokens(self, context: Sequence[int], replies: Sequence[Sequence[int]], *, top_k: int = 20) -> list[Scored]:
        """Teacher-forced records of each reply after ``context``: log-prob, top-k and exact entropy
        per token, equal to what :meth:`greedy` records for the same tokens. The prefix the replies
        share is computed once and forked; only (n, k) and (n,) arrays leave the device."""


# -- abilities beyond LanguageModel ----------------------------------------------------------------
# What some engines also offer. A caller that uses one checks ``isinstance(model, Ability)`` (the
# protocols are runtime-checkable: the check sees that the methods are there, not their signatures).
class ScoredRequests(Protocol):
    """Scored requests submitted while the engine runs (:meth:`ScoredGeneration.scored_stream`)."""

    def submit(self, prompt: Sequence[int], max_tokens: int, *, forced: int | None = None) -> str:
        """Queue one request (``forced``: it generates exactly that token); returns its id."""

    def __iter__(self) -> Iterator[tuple[str, Completion]]:
        """``(request id, completion with records)`` as each request finishes; a request submitted
        meanwhile joins the running batch."""


@runtime_checkable
class ScoredGeneration(Protocol):
    """An engine that can read each generated token's records as it generates it (vLLM), so
    two-phase decoding needs no scoring pass. ``scores_while_generating`` says whether this model's
    records are the ones a run keeps (vLLM: under ``scorer="engine"``; a twin scores otherwise)."""

    @property
    def scores_while_generating(self) -> bool: ...

    def scored_stream(self, *, top_k: int = 20, stop_token_ids: Sequence[int] = ()) -> ScoredRequests:
        """Requests of :meth:`generate_scored` submitted while the engine runs."""

    def generate_scored(
        self,
        prompts: Sequence[Sequence[int]],
        max_tokens: Sequence[int],
        *,
        forced: Sequence[int | None],
        top_k: int = 20,
        stop_token_ids: Sequence[int] = (),
    ) -> list[Completion]:
        """:meth:`LanguageModel.generate_until` whose completions carry each generated token's
        records, read as the engine generates it (two-phase decoding then needs no scoring pass:
        SPEC §3.1). A row whose ``forced[i]`` is a token id generates exactly that token instead: the
        records of a substitute the run placed there. Every row goes into :meth:`scored_stream` at
        once, each completion lands in its row's place (a row with no budget and nothing forced
        stays empty)."""
        stream = self.scored_stream(top_k=top_k, stop_token_ids=stop_token_ids)
        if any(len(p) == 0 for p in prompts):
            raise ValueError("generate_scored needs non-empty prompts")
        if not len(prompts) == len(max_tokens) == len(forced):
            raise ValueError("generate_scored needs one budget and one forced entry per prompt")
        result = [Completion([], "length", Scored.empty(top_k)) for _ in prompts]
        asked = {stream.submit(p, b, forced=f): i for i, (p, b, f) in enumerate(zip(prompts, max_tokens, forced)) if b > 0 or f is not None}
        for rid, done in stream:
            result[asked[rid]] = done
        return result


class DecodeStream(Protocol):
    """Lockstep greedy requests (rows, a hook, a budget) joining a running batch
    (:meth:`ContinuousBatching.stream`); iterating yields ``(request id, generations)`` as each
    request's last row ends. The counters say what the batch did."""

    requests: int
    peak_rows: int
    peak_columns: int
    steps: int  # forward passes of a ragged batch (0 otherwise)
    columns_live: int  # key columns one layer's attention read, summed over the steps
    columns_masked: int  # masked columns it read

    def submit(
        self,
        prompts: Sequence[Sequence[int]],
        max_new: int,
        *,
        hook: Hook | HookFn | None = None,
        forced: Sequence[Sequence[int]] | None = None,
        row_offset: int = 0,
        priority: float = 0.0,
    ) -> int:
        """Queue a request; returns its id."""

    def reprioritize(self, gid: int, priority: float) -> None:
        """A queued request's new priority."""

    def __iter__(self) -> Iterator[tuple[int, list[Generation]]]: ...


@runtime_checkable
class ContinuousBatching(Protocol):
    """An engine whose greedy decoding takes requests while it runs (hf's ``GreedyStream``): what
    the tamper sweep order schedules every question's requests on. ``ragged``: rows keep their own
    lengths (:mod:`.ragged`), so a one-row request joins the batch without padding."""

    ragged: bool

    def stream(self, *, top_k: int = 20, live_rows: int | None = None, progress: Callable[[int], None] | None = None) -> DecodeStream:
        """A stream of requests decoding together, at most ``live_rows`` rows at a time."""


@runtime_checkable
class FullDistribution(Protocol):
    """An engine that ships a whole next-token distribution to Python (hf; vLLM cannot afford it)."""

    def next_token_logprobs(self, seqs: Sequence[Sequence[int]]) -> np.ndarray:
        """``(len(seqs), vocab)`` log-softmax at the end of each sequence."""


@runtime_checkable
class ForkedReads(Protocol):
    """An engine that reads several short continuations of one prefix with the prefix computed once
    (a juror's label slots fork from its reading of the case, as a question's trials fork its prompt)."""

    def read_forks(
        self, prefixes: Sequence[Sequence[int]], tails: Sequence[Sequence[Sequence[int]]], asked: Sequence[Sequence[int]], *, top_k: int = 20
    ) -> list[NextToken]:
        """:meth:`LanguageModel.read_next` at the end of ``prefixes[g] + tails[g][j]``, in (g, j)
        order, ``asked`` aligned with that order; every tail non-empty."""


@runtime_checkable
class ScoredReads(Protocol):
    """An engine that reads a context's next position and scores continuations of it from one pass
    over the context (an audit reads both for every context: two passes read it twice)."""

    def read_scored(
        self, context: Sequence[int], asked: Sequence[int], continuations: Sequence[Sequence[int]], *, top_k: int = 20
    ) -> tuple[NextToken, list[np.ndarray]]:
        """:meth:`LanguageModel.read_next` at the end of ``context`` and
        :meth:`LanguageModel.continuation_logprobs` of ``continuations`` after it (none: an empty list)."""


@runtime_checkable
class ListedReads(Protocol):
    """An engine that may see only the top-k of a distribution (a server without a way to ask for
    given ids' log-probs). :meth:`read_listed` is :meth:`LanguageModel.read_next` where it can be;
    where it cannot, an asked id outside the listed top-k comes back NaN with the bound it is under
    (:attr:`NextToken.bound`), for a caller that reports an interval. ``read_next`` itself never
    returns a bound: it refuses what it cannot read exactly."""

    def read_listed(self, seqs: Sequence[Sequence[int]], asked: Sequence[Sequence[int]], *, top_k: int = 20) -> list[NextToken]: ...


@runtime_checkable
class SpecialTokens(Protocol):
    """An engine that tells special tokens (end-of-turn, template markers) from text."""

    def is_special(self, token_id: int) -> bool: ...
