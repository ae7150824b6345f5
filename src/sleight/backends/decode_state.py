"""The state of a lockstep greedy decode between forward passes, and the records of a position.

:func:`position_records` is the one formula of every record the hf engine gives (greedy decoding,
teacher-forced scoring, next-token reads). :class:`DecodeState` keeps each row's accepted tokens and
their records, applies a hook's edits (withdraw accepted tokens, force others) from the distributions
of the last :data:`RETRACT_WINDOW` steps, and retires finished rows; it knows no model and no cache
(:mod:`.decode_stream` runs it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from sleight.backends.base import Edit, EndStep, Generation, HookFn, NextToken

RETRACT_WINDOW = 6  # steps of full distributions kept, so an edit may retract up to 5 tokens


# -- the records of a position -----------------------------------------------------------------
@dataclass(frozen=True)
class Records:
    """What the model thought at each position of a ``(..., vocab)`` logits tensor."""

    lp: torch.Tensor  # (..., vocab) float32 log-softmax, kept on the device
    top_ids: np.ndarray  # (..., k) int64, best first
    top_lp: np.ndarray  # (..., k) float32
    entropy: np.ndarray  # (...,) float32, exact over the full vocabulary

    def greedy(self) -> list[int]:
        """Each position's argmax, the first of equal maxima as ``argmax`` gives it: read off the
        top-k (one pass over the vocabulary fewer) wherever its first two differ."""
        if self.top_ids.shape[-1] < 2:
            return self.lp.argmax(-1).tolist()
        ids = self.top_ids[..., 0].copy()
        tie = self.top_lp[..., 0] == self.top_lp[..., 1]
        if tie.any():
            ids[tie] = self.lp[torch.from_numpy(tie)].argmax(-1).cpu().numpy()
        return ids.tolist()


    def next_tokens(self, asked: Sequence[Sequence[int]]) -> list[NextToken]:
        """One :class:`NextToken` a row of a ``(rows, vocab)`` reading: the log-probs of the row's
        ``asked`` ids, its top-k and its entropy."""
        out = []
        for b, want in enumerate(asked):
            got = self.lp[b, torch.tensor(list(want), dtype=torch.long, device=self.lp.device)].double().cpu().numpy() if want else np.zeros(0)
            out.append(NextToken(got, self.top_ids[b].astype(np.int64), self.top_lp[b].astype(np.float64), float(self.entropy[b])))
        return out


def position_records(logits: torch.Tensor, top_k: int) -> Records:
    """``(..., vocab)`` logits -> the float32 log-softmax and, on the host, top-k ids and log-probs
    and the exact entropy per position. The one formula of every record: greedy decoding,
    teacher-forced scoring and next-token reads. ``top_k`` is capped at the vocabulary; <= 0 gives
    no top-k columns. The entropy is one fused dot product a position; a position with -inf
    log-probs (0 * -inf) takes the spelled-out sum, which counts those terms as 0."""
    lp = torch.log_softmax(logits.float(), dim=-1)
    ent = -torch.linalg.vecdot(lp.exp(), lp)
    bad = ent.isnan()
    if bool(bad.any()):
        ent[bad] = -(lp[bad].exp() * lp[bad]).nan_to_num().sum(-1)
    tv, ti = torch.topk(lp, max(0, min(top_k, lp.shape[-1])), dim=-1)
    return Records(lp, ti.cpu().numpy(), tv.cpu().numpy(), ent.cpu().numpy())


# -- lockstep decoding state -------------------------------------------------------------------
@dataclass
class _Row:
    """Book-keeping for one row of a lockstep decode."""

    out: list[int] = field(default_factory=list)
    lp: list[float] = field(default_factory=list)
    top_ids: list[np.ndarray] = field(default_factory=list)
    top_lp: list[np.ndarray] = field(default_factory=list)
    ent: list[float] = field(default_factory=list)
    forced: list[bool] = field(default_factory=list)
    cache_pos: list[int] = field(default_factory=list)  # cache column of each accepted token
    dist_step: list[int] = field(default_factory=list)  # decode step whose distribution scored it
    queue: list[int] = field(default_factory=list)  # forced tokens still to append
    edits: list[int] = field(default_factory=list)
    end_checked: bool = False
    done: bool = False
    finish: str = "length"
    end: EndStep | None = None  # the step that chose end-of-sequence
    max_new: int = 0  # this row's budget of new tokens
    hook: HookFn | None = None
    hook_row: int = 0  # the row index the hook knows this row by
    group: int = 0  # the request (group of rows) this row belongs to

    def generation(self, k: int) -> Generation:
        return Generation(
            token_ids=self.out,
            logprobs=np.asarray(self.lp, dtype=np.float64),
            top_ids=np.asarray(self.top_ids, dtype=np.int64).reshape(-1, k),
            top_logprobs=np.asarray(self.top_lp, dtype=np.float32).reshape(-1, k),
            entropy=np.asarray(self.ent, dtype=np.float32),
            forced=np.asarray(self.forced, dtype=bool),
            finish_reason=self.finish,
            edits=self.edits,
            end=self.end,
        )

    def retract(self, n: int) -> list[int]:
        """Withdraw the last ``n`` accepted tokens; returns their cache columns."""
        if not n:
            return []
        cols = self.cache_pos[len(self.cache_pos) - n :]
        for seq in (self.out, self.lp, self.top_ids, self.top_lp, self.ent, self.forced, self.cache_pos, self.dist_step):
            del seq[len(seq) - n :]
        return cols


@dataclass(frozen=True)
class _Kept:
    """One decode step's distribution, with the batch position each live row had at that step."""

    records: Records
    batch: dict[int, int]  # row -> batch position


class DecodeState:
    """Everything a lockstep decode knows between forward passes: each row's records, the row at
    each live batch position, and the last ``RETRACT_WINDOW`` steps' distributions. A token
    forced in place of retracted ones takes the first one's position, so it is scored by the
    distribution kept for that position: nothing is recomputed."""

    def __init__(
        self, forced: Sequence[Sequence[int]] = (), max_new: int = 0, hook: HookFn | None = None, row_offset: int = 0, eos: frozenset[int] = frozenset()
    ) -> None:
        self.rows: list[_Row] = []
        self.alive: list[int] = []  # the row of each live batch position
        self.eos = eos
        self.step = -1
        self.col = 0  # the cache column a token accepted at this step occupies
        self._kept: dict[int, _Kept] = {}
        if forced:
            self.add(forced, max_new, hook, row_offset)

    def add(self, forced: Sequence[Sequence[int]], max_new: int, hook: HookFn | None, row_offset: int = 0, group: int = 0) -> list[int]:
        """New rows (one per ``forced`` list), live from the next step on, after the live ones in
        the batch; the hook knows them as ``row_offset``, ``row_offset + 1``, ... Returns their rows."""
        new = list(range(len(self.rows), len(self.rows) + len(forced)))
        self.rows.extend(
            _Row(queue=list(f)[:max_new], max_new=max_new, hook=hook, hook_row=row_offset + i, group=group) for i, f in enumerate(forced)
        )
        self.alive.extend(new)
        return new

    def shift(self, n: int) -> None:
        """The cache lost its first ``n`` columns (masked for every live row): renumber."""
        self.col -= n
        for r in self.alive:
            row = self.rows[r]
            row.cache_pos = [c - n for c in row.cache_pos]

    def begin(self, records: Records, col: int) -> None:
        """The next step: its distribution (one per live batch position) and its cache column."""
        self.step += 1
        self.col = col
        self._kept[self.step] = _Kept(records, {r: b for b, r in enumerate(self.alive)})
        self._kept.pop(self.step - RETRACT_WINDOW, None)

    def choose(self, proposals: Sequence[int]) -> list[tuple[int, int]]:
        """Every live row takes its next token: a queued forced one, else its proposal (the
        argmax) unless the hook edits it. Returns the (batch position, cache column) cells of
        retracted tokens already in the cache, to mask out."""
        off: list[tuple[int, int]] = []
        for b, r in enumerate(self.alive):
            off.extend((b, c) for c in self._choose_row(r, int(proposals[b])))
        return off

    def _choose_row(self, r: int, proposed: int) -> list[int]:
        row = self.rows[r]
        off: list[int] = []
        if row.queue:
            self.accept(r, row.queue.pop(0), forced=True)
        else:
            edit = row.hook(row.hook_row, row.out, proposed) if row.hook else None
            if edit is not None:
                off += self.apply_edit(r, edit)
            elif proposed in self.eos:
                row.done, row.finish = True, "stop"
                row.end = self.end_step(r, proposed)
            else:
                self.accept(r, proposed, forced=False)
        if not row.done and len(row.out) >= row.max_new and not row.queue:
            # The budget is spent: one last look for the hook (a trigger pending at the end).
            edit = row.hook(row.hook_row, row.out, None) if row.hook and not row.end_checked else None
            row.end_checked = True
            if edit is not None:
                off += self.apply_edit(r, edit)
            if not row.queue:
                row.done, row.finish = True, "length"
        return off

    def end_step(self, r: int, tok: int) -> EndStep:
        """This step's records for row ``r``, which chose end-of-sequence ``tok``."""
        kept = self._kept[self.step]
        b, rec = kept.batch[r], kept.records
        return EndStep(tok, float(rec.lp[b, tok]), rec.top_ids[b], rec.top_lp[b], float(rec.entropy[b]))

    def accept(self, r: int, tok: int, *, forced: bool, step: int | None = None) -> None:
        """Append ``tok`` to row ``r`` at this step's cache column, recorded from the distribution
        of decode step ``step`` (default: this one)."""
        step = self.step if step is None else step
        kept = self._kept[step]
        b = kept.batch[r]
        rec = kept.records
        row = self.rows[r]
        row.out.append(tok)
        row.lp.append(float(rec.lp[b, tok]))
        row.top_ids.append(rec.top_ids[b])
        row.top_lp.append(rec.top_lp[b])
        row.ent.append(float(rec.entropy[b]))
        row.forced.append(forced)
        row.dist_step.append(step)
        row.cache_pos.append(self.col)

    def apply_edit(self, r: int, edit: Edit) -> list[int]:
        """Retract, then accept the first forced token now and queue the rest (within the budget).
        Returns the cache columns of retracted tokens already fed, to mask out."""
        row = self.rows[r]
        n_back = min(edit.retract, len(row.out))
        step = self.step
        off: list[int] = []
        if n_back:
            step = row.dist_step[len(row.out) - n_back]
            if step not in self._kept or r not in self._kept[step].batch:
                raise RuntimeError(f"edit retracts {n_back} tokens, past the kept window of {RETRACT_WINDOW}")
            off = [c for c in row.retract(n_back) if c != self.col]
        force = list(edit.force)[: max(row.max_new - len(row.out), 0)]
        if not force:
            row.done, row.finish = True, "length"
            return off
        self.accept(r, force[0], forced=True, step=step)
        row.edits.append(len(row.out) - 1)
        row.queue = force[1:]
        return off

    def fed(self) -> list[bool]:
        """Per live batch position: whether the row accepted a token at this step."""
        return [bool(self.rows[r].cache_pos) and self.rows[r].cache_pos[-1] == self.col for r in self.alive]

    def retire(self) -> list[int]:
        """Drop finished rows; returns the batch positions (of this step) that stay alive."""
        keep = [b for b, r in enumerate(self.alive) if not self.rows[r].done]
        self.alive = [self.alive[b] for b in keep]
        return keep
