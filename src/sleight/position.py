"""One reading of a scored position, shared by every instrument.

A *scored position* is the next token after a context ``c``. Everything an instrument reads there
comes from one batched :meth:`~sleight.backends.LanguageModel.read_next` call: the unrestricted
argmax, the top tokens, the entropy, and per declared option set the options' in-context first
tokens, the prefix condition, the mass and the distinctness. Nothing else in the package encodes
a continuation at a boundary (:func:`encode_continuation`) or renormalises over a declared set
(:func:`renormalise`).

The boundary rule is lm-evaluation-harness's (``TemplateLM._encode_pair``, ``api/model.py``): the
continuation's ids are the suffix of ``tok(c ‖ o)`` after ``tok(c)``, provided ``tok(c)`` is a
prefix of it; when the tokenizer merges across the boundary no option score is defined there.

Imports only :mod:`sleight.backends`, so the audit, the downstream pipelines and the jury can all
use it without importing one another.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from sleight.backends.base import ForkedReads, LanguageModel, ListedReads, NextToken, ScoredReads

Encode = Callable[[str], Sequence[int]]


# -- the boundary rule and the renormaliser (pure) -------------------------------------------------
def suffix_after(context_ids: Sequence[int], full_ids: Sequence[int]) -> list[int] | None:
    """``full_ids`` after ``context_ids`` when the latter is a strict prefix of it, else None."""
    n = len(context_ids)
    if len(full_ids) <= n or list(full_ids[:n]) != list(context_ids):
        return None
    return list(full_ids[n:])


def encode_in_context(encode: Encode, context_text: str, continuation: str) -> list[int] | None:
    """Ids of ``continuation`` after ``context_text`` under ``encode`` (the prefix condition), or None."""
    return suffix_after(encode(context_text), encode(context_text + continuation))


def encode_continuation(model: LanguageModel, context_text: str, continuation: str) -> list[int] | None:
    """Tokens of ``continuation`` as the model sees them after ``context_text``; None when the
    tokenizer merges across the boundary (then no option score is well defined there)."""
    return encode_in_context(model.encode, context_text, continuation)


def renormalise(logprobs: Sequence[float | None]) -> np.ndarray | None:
    """Softmax over a declared set of log-probabilities; None when the set is empty or any member
    is missing (a boundary not preserved) or not finite."""
    if len(logprobs) == 0 or any(v is None or not np.isfinite(v) for v in logprobs):
        return None
    lp = np.asarray(logprobs, dtype=np.float64)
    p = np.exp(lp - lp.max())
    return p / p.sum()


def distinct_mass(ids: Sequence[int | None], logprob: Callable[[int], float]) -> float | None:
    """Σ p over the distinct ids (each token once); None -- never 0 -- when any id is missing."""
    if not ids or any(t is None for t in ids):
        return None
    return float(sum(np.exp(logprob(int(t))) for t in dict.fromkeys(ids)))  # type: ignore[arg-type]


# -- the readings -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class OptionSetReading:
    """One declared option set read at a position.

    ``encodings`` are the in-context ids (None where the prefix condition failed); ``mass`` sums the
    probabilities of the *distinct* in-context first tokens and is None (never 0) unless every
    boundary is preserved. ``isolated_ids`` are each option's first id encoded on its own (how
    lm-polygraph picks ``True``), with their log-probs at the same position. ``token_logprobs`` hold
    every token of each in-context encoding when the set was read with ``score_options``.

    ``mass_bounds`` is the mass as an interval: ``(mass, mass)`` where every first token was read,
    and where a server listed only its top-k and some first token was not among them (its
    log-prob then None, the mass None: never a guess), what the listed ones carry and that plus at
    most the k-th listed probability for each unlisted one. None when the boundary breaks.
    """

    options: tuple[str, ...]
    encodings: tuple[tuple[int, ...] | None, ...]
    first_ids: tuple[int | None, ...]
    boundary_preserved: bool
    distinct: bool
    first_logprobs: tuple[float | None, ...]
    mass: float | None
    isolated_ids: tuple[int | None, ...]
    isolated_logprobs: tuple[float | None, ...]
    token_logprobs: tuple[tuple[float, ...] | None, ...] | None = None
    mass_bounds: tuple[float, float] | None = None

    @property
    def logprobs(self) -> tuple[float | None, ...]:
        """Full-sequence log-probability of each option in context (None where not available:
        boundary not preserved, or a multi-token option read without ``score_options``)."""
        out: list[float | None] = []
        for enc, first, toks in zip(self.encodings, self.first_logprobs, self.token_logprobs or [None] * len(self.options)):
            if enc is None:
                out.append(None)
            elif toks is not None:
                out.append(float(np.sum(toks)))
            else:
                out.append(first if len(enc) == 1 else None)
        return tuple(out)

    @property
    def isolated_mass(self) -> float | None:
        """The mass of the options' first tokens encoded alone, read at the same position."""
        if any(v is None for v in self.isolated_logprobs):
            return None
        lp = {t: float(v) for t, v in zip(self.isolated_ids, self.isolated_logprobs) if v is not None}
        return distinct_mass(self.isolated_ids, lp.__getitem__)


@dataclass(frozen=True)
class PositionReading:
    """Everything read at the next position after one context (log-probabilities in nats)."""

    context_ids: tuple[int, ...]
    argmax_id: int
    argmax_logprob: float
    top_ids: tuple[int, ...]
    top_logprobs: tuple[float, ...]
    entropy: float
    option_sets: tuple[OptionSetReading, ...]
    asked_ids: tuple[int, ...] = ()
    asked_logprobs: tuple[float, ...] = ()

    def logprob(self, token_id: int) -> float:
        """log p(token) at this position, for any token that was asked about or is in the top-k."""
        for ids, lps in ((self.asked_ids, self.asked_logprobs), (self.top_ids, self.top_logprobs)):
            if token_id in ids:
                return lps[ids.index(token_id)]
        raise KeyError(f"token {token_id} was not read at this position")


def _alone_ids(model: LanguageModel, option_sets: Sequence[Sequence[Sequence[str]]]) -> dict[str, int | None]:
    """Each distinct option's first token id when it is encoded alone (None: it encodes to nothing)."""
    alone: dict[str, int | None] = {}
    for sets in option_sets:
        for opts in sets:
            for o in opts:
                if o not in alone:
                    ids = model.encode(o)
                    alone[o] = int(ids[0]) if ids else None
    return alone


def _asked_ids(
    option_sets: Sequence[Sequence[Sequence[str]]], encs: Sequence[Sequence[Sequence[list[int] | None]]], alone: dict[str, int | None], extra_ids: Sequence[int]
) -> list[list[int]]:
    """Per context, the ids to read: its options' in-context and isolated first ids, then ``extra_ids`` (once each, in order)."""
    asked: list[list[int]] = []
    for sets, per_set in zip(option_sets, encs):
        want = [e[0] for es in per_set for e in es if e] + [alone[o] for opts in sets for o in opts] + list(extra_ids)
        asked.append(list(dict.fromkeys(int(t) for t in want if t is not None)))
    return asked


def _multi(es: Sequence[list[int] | None]) -> list[list[int]]:
    """The in-context encodings of the options with later tokens to score."""
    return [e for e in es if e is not None and len(e) > 1]


def _token_logprobs(
    es: Sequence[list[int] | None], lp: dict[int, float], later: Callable[[list[list[int]]], list[np.ndarray]]
) -> tuple[tuple[float, ...] | None, ...]:
    """Every token of each option's log-prob in context: the first from the read position, the later
    ones of multi-token options from ``later`` (not called when no option has any; none for an
    option whose first token a server did not list)."""
    multi = {j: e for j, e in enumerate(es) if e is not None and len(e) > 1 and e[0] in lp}
    scored = dict(zip(multi, later(list(multi.values())))) if multi else {}
    return tuple(
        None if e is None or e[0] not in lp else (lp[e[0]], *(float(v) for v in scored[j][1:])) if j in scored else (lp[e[0]],)
        for j, e in enumerate(es)
    )


def mass_bounds(first: Sequence[int], lp: dict[int, float], bound: float | None) -> tuple[float, float]:
    """The mass of the distinct ``first`` ids as an interval: the listed ones (``lp``) summed, and
    that plus ``exp(bound)`` for each unlisted one, at most 1 (pure)."""
    distinct = list(dict.fromkeys(first))
    low = float(sum(np.exp(lp[t]) for t in distinct if t in lp))
    unlisted = sum(t not in lp for t in distinct)
    if not unlisted:
        return low, low
    if bound is None:
        raise ValueError("an unlisted id needs the bound it is under")
    return low, min(1.0, low + unlisted * float(np.exp(bound)))


def _option_set_reading(
    opts: Sequence[str],
    es: Sequence[list[int] | None],
    alone: dict[str, int | None],
    lp: dict[int, float],
    tokens: tuple[tuple[float, ...] | None, ...] | None,
    bound: float | None = None,
) -> OptionSetReading:
    """One option set read at one position (``es``: each option's in-context encoding after the
    context; ``lp`` the log-probs read, without the ids a server did not list, which are under ``bound``)."""
    first = tuple(int(e[0]) if e else None for e in es)
    preserved = bool(es) and all(e is not None for e in es)
    iso = tuple(alone[o] for o in opts)
    listed = preserved and all(t in lp for t in first)
    return OptionSetReading(
        options=tuple(opts),
        encodings=tuple(tuple(e) if e is not None else None for e in es),
        first_ids=first,
        boundary_preserved=preserved,
        distinct=preserved and len(set(first)) == len(first),
        first_logprobs=tuple(lp.get(t) if t is not None else None for t in first),
        mass=distinct_mass(first, lp.__getitem__) if listed else None,
        isolated_ids=iso,
        isolated_logprobs=tuple(lp.get(t) if t is not None else None for t in iso),
        token_logprobs=tokens,
        mass_bounds=mass_bounds([int(t) for t in first if t is not None], lp, bound) if preserved else None,
    )


def fork_groups(seqs: Sequence[Sequence[int]], forks: int) -> tuple[list[list[int]], list[list[list[int]]]]:
    """Consecutive runs of ``forks`` sequences split into their common prefix and their tails, the
    prefix stopping a token short of the shortest so every tail is non-empty (pure)."""
    prefixes: list[list[int]] = []
    tails: list[list[list[int]]] = []
    for lo in range(0, len(seqs), forks):
        group = [list(s) for s in seqs[lo : lo + forks]]
        n = 0
        limit = min(len(s) for s in group) - 1
        while n < limit and all(s[n] == group[0][n] for s in group):
            n += 1
        prefixes.append(group[0][:n])
        tails.append([s[n:] for s in group])
    return prefixes, tails


def read_ids(model: LanguageModel, seqs: Sequence[Sequence[int]], *, top_k: int = 1, listed: bool = False) -> list[NextToken]:
    """The next position after each token sequence, in one batched read with no asked ids (a
    position that is not a rendered context: a context and some tokens after it)."""
    return _read_next(model, [list(s) for s in seqs], [[] for _ in seqs], top_k, 1, listed)


def _read_next(model: LanguageModel, ctx_ids: list[list[int]], asked: list[list[int]], top_k: int, forks: int, listed: bool) -> list[NextToken]:
    """One batched read of every context's next position, each shared prefix once where the engine
    forks; ``listed``: through :class:`~sleight.backends.base.ListedReads` where the engine has it."""
    if listed and isinstance(model, ListedReads):
        return model.read_listed(ctx_ids, asked, top_k=top_k)
    if forks > 1 and isinstance(model, ForkedReads):
        prefixes, tails = fork_groups(ctx_ids, forks)
        if all(prefixes):
            return model.read_forks(prefixes, tails, asked, top_k=top_k)
    return model.read_next(ctx_ids, asked, top_k=top_k)


def read_positions(
    model: LanguageModel,
    contexts: Sequence[str],
    option_sets: Sequence[Sequence[Sequence[str]]],
    *,
    top_k: int = 20,
    extra_ids: Sequence[int] = (),
    score_options: bool = False,
    forks: int = 1,
    listed: bool = False,
) -> list[PositionReading]:
    """Read each context's next position against each of its option sets.

    ``option_sets[i]`` are the sets declared for ``contexts[i]``. One batched ``read_next`` call
    serves every context (the options' in-context and isolated first ids, plus ``extra_ids``, are the
    asked ids). With ``score_options`` the later tokens of multi-token options are scored too (one
    ``continuation_logprobs`` call per context that has any), so full-sequence log-probs exist; an
    engine that reads and scores from one pass (:class:`~sleight.backends.base.ScoredReads`) reads
    each context once instead.
    ``forks``: consecutive runs of that many contexts share a long prefix (a vote's label slots),
    read once where the engine can fork it (:class:`~sleight.backends.base.ForkedReads`).
    ``listed``: a caller that reports intervals (:attr:`OptionSetReading.mass_bounds`) accepts a
    server's top-k listing where the server cannot be asked for given ids; an unlisted option's
    log-prob is then None. Without it such a server is refused in one line.
    """
    if len(option_sets) != len(contexts):
        raise ValueError(f"{len(contexts)} contexts but {len(option_sets)} lists of option sets")
    if top_k < 1:
        raise ValueError("read_positions needs top_k >= 1 (the argmax is the first top token)")
    ctx_ids = [list(model.encode(c)) for c in contexts]
    if any(not ids for ids in ctx_ids):
        raise ValueError("read_positions needs non-empty contexts")
    encs = [
        [[suffix_after(ids, model.encode(c + o)) for o in opts] for opts in sets]
        for c, ids, sets in zip(contexts, ctx_ids, option_sets)
    ]
    alone = _alone_ids(model, option_sets)
    asked = _asked_ids(option_sets, encs, alone, extra_ids)
    # A context with multi-token options to score is read once where the engine reads and scores
    # from one pass (it is read at batch 1 for its continuations either way); the rest in one batched read.
    wanted = [list({tuple(e): e for es in per_set for e in _multi(es)}.values()) if score_options else [] for per_set in encs]
    fused = forks == 1 and isinstance(model, ScoredReads) and not (listed and isinstance(model, ListedReads))
    one_pass = [i for i in range(len(ctx_ids)) if fused and wanted[i]]
    found: dict[int, dict[tuple[int, ...], np.ndarray]] = {}
    got: dict[int, NextToken] = {}
    for i in one_pass:
        assert isinstance(model, ScoredReads)
        got[i], scored = model.read_scored(ctx_ids[i], asked[i], wanted[i], top_k=top_k)
        found[i] = {tuple(e): lps for e, lps in zip(wanted[i], scored)}
    rest = [i for i in range(len(ctx_ids)) if i not in got]
    if rest:
        got.update(zip(rest, _read_next(model, [ctx_ids[i] for i in rest], [asked[i] for i in rest], top_k, forks, listed)))
    nexts = [got[i] for i in range(len(ctx_ids))]

    out: list[PositionReading] = []
    for i, (sets, per_set, nt) in enumerate(zip(option_sets, encs, nexts)):
        lp = {t: float(v) for t, v in zip(asked[i], nt.logprobs) if nt.bound is None or not np.isnan(v)}

        def later(multi: list[list[int]], i: int = i) -> list[np.ndarray]:
            return [found[i][tuple(e)] for e in multi] if i in found else model.continuation_logprobs(ctx_ids[i], multi)

        readings = [
            _option_set_reading(opts, es, alone, lp, _token_logprobs(es, lp, later) if score_options else None, nt.bound)
            for opts, es in zip(sets, per_set)
        ]
        top_ids = tuple(int(t) for t in nt.top_ids)
        top_lps = tuple(float(v) for v in nt.top_logprobs)
        out.append(
            PositionReading(
                context_ids=tuple(ctx_ids[i]),
                argmax_id=top_ids[0],
                argmax_logprob=top_lps[0],
                top_ids=top_ids,
                top_logprobs=top_lps,
                entropy=float(nt.entropy),
                option_sets=tuple(readings),
                asked_ids=tuple(asked[i]),
                asked_logprobs=tuple(lp.get(t, float("nan")) for t in asked[i]),
            )
        )
    return out
