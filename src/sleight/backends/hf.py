"""transformers engine (CPU or CUDA): the default, and the reference for every other engine.

Decoding runs all rows of a batch in lockstep over one KV cache. A prefix that every row shares is
computed once and its cache repeated across the batch (forked, not recomputed). Rows are padded
with masked positions and carry explicit ``position_ids``, so a pad or a retracted token can sit
anywhere in a row, not only at its left end.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from sleight.backends.base import (
    UNWARPED,
    Completion,
    Edit,
    EndStep,
    Generation,
    Hook,
    ModelInfo,
    NextToken,
    Sample,
    Sampling,
    Scored,
    sha256_text,
)
from sleight.backends.heap import release_freed_memory
from sleight.backends.kv_slab import SlabCache, slab_supported
from sleight.backends.ragged import Prefix, RaggedCache
from sleight.backends.ragged import register as register_ragged
from sleight.backends.resolve import ResolvedModel
from sleight.backends.tokens import HFTokenizerOps, check_template_kwargs
from sleight.errors import UserError

if TYPE_CHECKING:
    from transformers import Cache

_HookFn = Callable[[int, Sequence[int], int | None], Edit | None]


def pick_device(device: str | None) -> str:
    if device and device != "auto":
        if device.startswith("cuda") and not torch.cuda.is_available():
            raise UserError(f"device '{device}' requested but CUDA is not available here")
        return device
    return "cuda" if torch.cuda.is_available() else "cpu"


_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
_SCORE_BYTES = 1 << 30  # bound on a scoring pass's logits and the tensors derived from them
_RETRACT_WINDOW = 6  # steps of full distributions kept, so an edit may retract up to 5 tokens


# -- the records of a position -----------------------------------------------------------------
@dataclass(frozen=True)
class _Records:
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


def _position_records(logits: torch.Tensor, top_k: int) -> _Records:
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
    return _Records(lp, ti.cpu().numpy(), tv.cpu().numpy(), ent.cpu().numpy())


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
    hook: _HookFn | None = None
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

    records: _Records
    batch: dict[int, int]  # row -> batch position


class _DecodeState:
    """Everything a lockstep decode knows between forward passes: each row's records, the row at
    each live batch position, and the last ``_RETRACT_WINDOW`` steps' distributions. A token
    forced in place of retracted ones takes the first one's position, so it is scored by the
    distribution kept for that position: nothing is recomputed."""

    def __init__(
        self, forced: Sequence[Sequence[int]] = (), max_new: int = 0, hook: _HookFn | None = None, row_offset: int = 0, eos: frozenset[int] = frozenset()
    ) -> None:
        self.rows: list[_Row] = []
        self.alive: list[int] = []  # the row of each live batch position
        self.eos = eos
        self.step = -1
        self.col = 0  # the cache column a token accepted at this step occupies
        self._kept: dict[int, _Kept] = {}
        if forced:
            self.add(forced, max_new, hook, row_offset)

    def add(self, forced: Sequence[Sequence[int]], max_new: int, hook: _HookFn | None, row_offset: int = 0, group: int = 0) -> list[int]:
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

    def begin(self, records: _Records, col: int) -> None:
        """The next step: its distribution (one per live batch position) and its cache column."""
        self.step += 1
        self.col = col
        self._kept[self.step] = _Kept(records, {r: b for b, r in enumerate(self.alive)})
        self._kept.pop(self.step - _RETRACT_WINDOW, None)

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
                raise RuntimeError(f"edit retracts {n_back} tokens, past the kept window of {_RETRACT_WINDOW}")
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


class HFModel(HFTokenizerOps):
    """A transformers causal LM behind :class:`sleight.backends.base.LanguageModel`."""

    def __init__(
        self,
        resolved: ResolvedModel,
        *,
        device: str | None = None,
        dtype: str = "float32",
        batch_size: int = 128,
        threads: int | None = None,
        chat_template_kwargs: Mapping[str, Any] | None = None,
    ) -> None:
        import transformers
        from transformers import AutoModelForCausalLM, AutoTokenizer

        if dtype not in _DTYPES:
            raise UserError(f"unknown dtype '{dtype}' (choose from {', '.join(_DTYPES)})")
        self.device = pick_device(device)
        if threads:
            # Before the first forward pass: torch sizes its OpenMP pool on first use.
            torch.set_num_threads(max(1, int(threads)))
        self.resolved = resolved
        self.batch_size = batch_size
        self.chat_template_kwargs = check_template_kwargs(chat_template_kwargs)
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(resolved.load_path)
            self.model = AutoModelForCausalLM.from_pretrained(resolved.load_path, dtype=_DTYPES[dtype])
        except OSError as exc:
            raise UserError(f"could not load model '{resolved.spec}': {exc}") from None
        self.model.to(self.device).eval()  # type: ignore[arg-type]  # transformers types .to() as a decorator
        self._cache_kwarg = cache_kwarg(self.model)
        # In-place KV writes where the model's layers allow it (kv_slab): the same numbers, no copy a step.
        self._slab = slab_supported(self.model.config)
        # Ragged batches (rows of their own lengths, attention over live columns only) where the
        # model runs transformers' SDPA attention: :mod:`.ragged`. Other calls run SDPA unchanged.
        self._ragged = self._slab and register_ragged(self.model)
        self._vocab = int(self.model.get_output_embeddings().weight.shape[0])
        eos = self.model.generation_config.eos_token_id
        eos = [eos] if isinstance(eos, int) else list(eos or [])
        if self.tokenizer.eos_token_id is not None:
            eos.append(self.tokenizer.eos_token_id)
        self._eos = frozenset(eos)
        self._pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else min(self._eos)
        self.info = ModelInfo(
            spec=resolved.spec,
            model_id=resolved.model_id,
            revision=resolved.revision,
            chat_template_sha256=sha256_text(self.tokenizer.chat_template),
            tokenizer=f"{type(self.tokenizer).__name__}:{self.tokenizer.name_or_path}",
            engine="hf",
            engine_version=f"transformers {transformers.__version__}, torch {torch.__version__}",
            dtype=dtype,
            device=self.device,
            batch_size=batch_size,
            threads=torch.get_num_threads(),
            chat_template_kwargs=dict(self.chat_template_kwargs),
        )

    # -- forward passes ------------------------------------------------------------------------
    @torch.inference_mode()
    def _forward(
        self,
        ids: torch.Tensor,
        mask: torch.Tensor | None,
        pos: torch.Tensor,
        cache: Cache | None = None,
        last_only: bool = False,
        keep: int = 0,
    ) -> tuple[torch.Tensor, Cache]:
        """One forward pass; ``last_only`` computes the output layer at the last position only
        (a (batch, seq, vocab) logits tensor is the biggest allocation of a long prompt), ``keep``
        at the last ``keep`` positions."""
        keep = 1 if last_only else keep
        extra: dict[str, Any] = {"logits_to_keep": keep} if keep else {}
        extra[self._cache_kwarg] = cache if cache is not None or not self._slab else SlabCache()
        if isinstance(cache, RaggedCache):
            extra["ragged"] = cache  # read by ragged.ragged_attention; no mask is built
        out = self.model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True, **extra)
        return out.logits, getattr(out, "cache", None) or out.past_key_values

    def _padded(self, seqs: Sequence[Sequence[int]], side: str = "left") -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Batch tensors for ragged sequences: ids, attention mask and explicit positions."""
        width = max(len(s) for s in seqs)
        ids = torch.full((len(seqs), width), self._pad, dtype=torch.long)
        mask = torch.zeros((len(seqs), width), dtype=torch.long)
        for i, s in enumerate(seqs):
            if not s:
                continue
            sl = slice(width - len(s), width) if side == "left" else slice(0, len(s))
            ids[i, sl] = torch.tensor(list(s), dtype=torch.long)
            mask[i, sl] = 1
        pos = (mask.cumsum(-1) - 1).clamp(min=0)
        return ids.to(self.device), mask.to(self.device), pos.to(self.device)

    def next_token_logprobs(self, seqs: Sequence[Sequence[int]]) -> np.ndarray:
        if any(len(s) == 0 for s in seqs):
            raise ValueError("next_token_logprobs needs non-empty sequences")
        rows = []
        for start in range(0, len(seqs), self.batch_size):
            chunk = seqs[start : start + self.batch_size]
            ids, mask, pos = self._padded(chunk, "left")
            logits, _ = self._forward(ids, mask, pos, last_only=True)
            rows.append(torch.log_softmax(logits[:, -1, :].float(), dim=-1).cpu().numpy())
        return np.concatenate(rows, axis=0)

    def read_next(
        self, seqs: Sequence[Sequence[int]], asked: Sequence[Sequence[int]], *, top_k: int = 20
    ) -> list[NextToken]:
        if len(asked) != len(seqs):
            raise ValueError("read_next needs one list of asked ids per sequence")
        if any(len(s) == 0 for s in seqs):
            raise ValueError("read_next needs non-empty sequences")
        out: list[NextToken] = []
        for start in range(0, len(seqs), self.batch_size):
            chunk = seqs[start : start + self.batch_size]
            ids, mask, pos = self._padded(chunk, "left")
            logits, _ = self._forward(ids, mask, pos, last_only=True)
            rec = _position_records(logits[:, -1, :], top_k)
            lp = rec.lp
            for b, want in enumerate(asked[start : start + self.batch_size]):
                got = lp[b, torch.tensor(list(want), dtype=torch.long, device=lp.device)] if want else lp[b, :0]
                out.append(
                    NextToken(
                        got.double().cpu().numpy(),
                        rec.top_ids[b].astype(np.int64),
                        rec.top_lp[b].astype(np.float64),
                        float(rec.entropy[b]),
                    )
                )
        return out

    def next_token_logits(self, seqs: Sequence[Sequence[int]]) -> np.ndarray:
        """Raw logits at the end of each sequence (for readouts that reproduce a library's own
        post-processing of logits, such as lm-polygraph's sanitiser)."""
        rows = []
        for start in range(0, len(seqs), self.batch_size):
            ids, mask, pos = self._padded(seqs[start : start + self.batch_size], "left")
            logits, _ = self._forward(ids, mask, pos, last_only=True)
            rows.append(logits[:, -1, :].float().cpu().numpy())
        return np.concatenate(rows, axis=0)

    def continuation_logprobs(
        self, context: Sequence[int], continuations: Sequence[Sequence[int]]
    ) -> list[np.ndarray]:
        if not context:
            raise ValueError("continuation_logprobs needs a non-empty context")
        if any(len(c) == 0 for c in continuations):
            raise ValueError("continuation_logprobs got an empty continuation")
        results: list[np.ndarray] = []
        # The context is computed once; its cache is repeated across the continuations.
        ids, mask, pos = self._padded([context])
        logits, cache = self._forward(ids, mask, pos, last_only=True)
        first = torch.log_softmax(logits[0, -1, :].float(), dim=-1)
        for start in range(0, len(continuations), self.batch_size):
            chunk = continuations[start : start + self.batch_size]
            tails = [list(c[:-1]) for c in chunk]
            per = [[float(first[c[0]])] for c in chunk]
            if any(tails):
                tid, tmask, _ = self._padded(tails, "right")
                ctx_mask = torch.ones((len(chunk), len(context)), dtype=torch.long, device=self.device)
                tpos = len(context) + torch.arange(tid.shape[1], device=self.device).expand(len(chunk), -1)
                tlogits, _ = self._forward(tid, torch.cat([ctx_mask, tmask], 1), tpos, _repeat_cache(cache, len(chunk)))
                tlp = torch.log_softmax(tlogits.float(), dim=-1)
                for i, c in enumerate(chunk):
                    for j in range(1, len(c)):
                        per[i].append(float(tlp[i, j - 1, c[j]]))
            results.extend(np.asarray(p, dtype=np.float64) for p in per)
        return results

    @torch.inference_mode()
    def score_tokens(self, context: Sequence[int], replies: Sequence[Sequence[int]], *, top_k: int = 20) -> list[Scored]:
        if not context:
            raise ValueError("score_tokens needs a non-empty context")
        ctx = list(context)
        out: list[Scored] = [Scored.empty(top_k) for _ in replies]
        live = [i for i, r in enumerate(replies) if len(r)]
        if not live:
            return out
        full = [ctx + [int(t) for t in replies[i]] for i in live]
        # 1. What every reply shares (the context and the replies' common start), once, at batch 1:
        # its last ``head`` positions score the first ``head`` tokens of every reply.
        shared = _common_prefix_len(full)
        head = shared - len(ctx) + 1
        ids = torch.tensor([full[0][:shared]], device=self.device)
        logits, cache = self._forward(ids, torch.ones_like(ids), torch.arange(shared, device=self.device)[None], keep=head)
        h = _position_records(logits[0], top_k)
        parts: dict[int, list[tuple[np.ndarray, ...]]] = {}
        for b, i in enumerate(live):
            toks = full[b][len(ctx) : len(ctx) + head]
            idx = torch.arange(len(toks), device=self.device)
            tok_lp = h.lp[idx, torch.tensor(toks, device=self.device)]
            n = len(toks)
            parts[i] = [(tok_lp.double().cpu().numpy(), h.top_ids[:n], h.top_lp[:n], h.entropy[:n])]
        # 2. The rest of each reply, its cache forked from the shared part, rows in memory-sized groups.
        tails = [(i, full[b][shared : len(full[b]) - 1], full[b][shared + 1 :]) for b, i in enumerate(live) if len(full[b]) > shared + 1]
        if tails:
            width = max(len(t[1]) for t in tails)
            room = _SCORE_BYTES * (4 if self.device.startswith("cuda") else 1)
            rows = max(1, min(self.batch_size, room // max(1, 16 * width * self._vocab)))
            for start in range(0, len(tails), rows):
                chunk = tails[start : start + rows]
                tid, tmask, _ = self._padded([t[1] for t in chunk], "right")
                pre = torch.ones((len(chunk), shared), dtype=torch.long, device=self.device)
                tpos = shared + torch.arange(tid.shape[1], device=self.device).expand(len(chunk), -1)
                tlogits, _ = self._forward(tid, torch.cat([pre, tmask], 1), tpos, _repeat_cache(cache, len(chunk)))
                rec = _position_records(tlogits, top_k)
                want, _, _ = self._padded([t[2] for t in chunk], "right")
                tok_lp_all = rec.lp.gather(-1, want[..., None])[..., 0].double().cpu().numpy()
                for b, (i, fed, _) in enumerate(chunk):
                    n = len(fed)
                    parts[i].append((tok_lp_all[b, :n], rec.top_ids[b, :n], rec.top_lp[b, :n], rec.entropy[b, :n]))
                del rec, tlogits
        for b, i in enumerate(live):
            lp_, ids_, top_, ent_ = (np.concatenate(a) for a in zip(*parts[i]))
            out[i] = Scored(
                token_ids=list(full[b][len(ctx) :]),
                logprobs=lp_.astype(np.float64),
                top_ids=ids_.astype(np.int64).reshape(-1, top_k),
                top_logprobs=top_.astype(np.float32).reshape(-1, top_k),
                entropy=ent_.astype(np.float32),
            )
        return out

    # -- decoding ------------------------------------------------------------------------------
    def generate_until(
        self,
        prompts: Sequence[Sequence[int]],
        max_tokens: int | Sequence[int],
        *,
        stop_token_ids: Sequence[int] = (),
        stop: Sequence[str] = (),
        progress: Callable[[int], None] | None = None,
    ) -> list[Completion]:
        """Batched lockstep greedy with no records: the hf side of two-phase decoding."""
        if not prompts:
            return []
        if any(len(p) == 0 for p in prompts):
            raise ValueError("generate_until needs non-empty prompts")
        budgets = [int(max_tokens)] * len(prompts) if isinstance(max_tokens, int) else [int(m) for m in max_tokens]
        if len(budgets) != len(prompts):
            raise ValueError("generate_until needs one max_tokens per prompt (or one for all)")
        stops = frozenset(int(t) for t in stop_token_ids)
        out: list[Completion] = []
        for start in range(0, len(prompts), self.batch_size):
            sl = slice(start, start + self.batch_size)
            out.extend(self._until_batch(list(prompts[sl]), budgets[sl], stops, tuple(stop), progress))
        return out

    @torch.inference_mode()
    def _until_batch(
        self,
        prompts: Sequence[Sequence[int]],
        budgets: Sequence[int],
        stops: frozenset[int],
        stop_strs: tuple[str, ...],
        progress: Callable[[int], None] | None,
    ) -> list[Completion]:
        n = len(prompts)
        outs: list[list[int]] = [[] for _ in range(n)]
        finish = ["length"] * n
        go = [i for i in range(n) if budgets[i] > 0]
        if not go:
            return [Completion([], "length") for _ in range(n)]
        logits, cache, mask = self._prefill([prompts[i] for i in go])
        alive = go
        while alive:
            nxt = torch.log_softmax(logits.float(), dim=-1).argmax(-1).tolist()
            keep = []
            for b, r in enumerate(alive):
                tok = int(nxt[b])
                if tok in self._eos:
                    finish[r] = "stop"
                    continue
                outs[r].append(tok)
                if tok in stops or (stop_strs and any(s in self.decode(outs[r]) for s in stop_strs)):
                    finish[r] = "stop_token"
                elif len(outs[r]) >= budgets[r]:
                    finish[r] = "length"
                else:
                    keep.append(b)
            if progress:
                progress(len(alive))
            if not keep:
                break
            mask = torch.cat([mask, torch.ones((len(alive), 1), dtype=torch.long, device=self.device)], 1)
            feed = [outs[alive[b]][-1] for b in keep]
            if len(keep) < len(alive):
                idx = torch.tensor(keep, device=self.device)
                cache = _select_cache(cache, idx)
                mask = mask[idx]
                alive = [alive[b] for b in keep]
            pos = (mask.sum(-1) - 1)[:, None]
            logits, cache = self._forward(torch.tensor(feed, device=self.device)[:, None], mask, pos, cache, last_only=True)
            logits = logits[:, -1, :]
        return [Completion(o, f) for o, f in zip(outs, finish)]

    def _prefill(self, prompts: Sequence[Sequence[int]]) -> tuple[torch.Tensor, Cache, torch.Tensor]:
        """The prompts' forward pass: the prefix they all share once at batch 1, its cache forked,
        then each row's own suffix left-padded after it with explicit positions. Returns the last
        position's logits, the cache and the attention mask."""
        n = len(prompts)
        dev = self.device
        # Each row keeps >= 1 token of its own, so every row has a last position of its own.
        shared = min(_common_prefix_len(prompts), min(len(p) for p in prompts) - 1)
        cache: Cache | None = None
        mask = torch.zeros((n, 0), dtype=torch.long, device=dev)
        if shared > 0:
            ids = torch.tensor([list(prompts[0][:shared])], device=dev)
            _, prefix = self._forward(ids, torch.ones_like(ids), torch.arange(shared, device=dev)[None], last_only=True)
            cache = _repeat_cache(prefix, n, copy=False)
            mask = torch.ones((n, shared), dtype=torch.long, device=dev)
        tid, tmask, _ = self._padded([p[shared:] for p in prompts], "left")
        pos = shared + (tmask.cumsum(-1) - 1).clamp(min=0)
        mask = torch.cat([mask, tmask], 1)
        logits, out_cache = self._forward(tid, mask, pos, cache, last_only=True)
        return logits[:, -1, :], out_cache, mask

    def greedy(
        self,
        prompts: Sequence[Sequence[int]],
        max_new_tokens: int,
        *,
        hook: Hook | _HookFn | None = None,
        forced: Sequence[Sequence[int]] | None = None,
        top_k: int = 20,
        progress: Callable[[int], None] | None = None,
    ) -> list[Generation]:
        """Rows in batches of ``batch_size``, one batch after the other (each a request of its own
        to an empty :class:`GreedyStream`)."""
        if not prompts:
            return []
        if any(len(p) == 0 for p in prompts):
            raise ValueError("greedy needs non-empty prompts")
        forced = forced or [[] for _ in prompts]
        out: list[Generation] = []
        for start in range(0, len(prompts), self.batch_size):
            sl = slice(start, start + self.batch_size)
            stream = self.stream(top_k=top_k, live_rows=self.batch_size, progress=progress)
            stream.submit(prompts[sl], max_new_tokens, hook=hook, forced=forced[sl], row_offset=start)
            out.extend(g for _, gens in stream for g in gens)
        return out

    def sample(
        self,
        prompts: Sequence[Sequence[int]],
        max_new_tokens: int,
        *,
        n: int = 1,
        sampling: Sampling = UNWARPED,
        stop_token_ids: Sequence[int] = (),
    ) -> list[list[Sample]]:
        """``n`` seeded samples of each prompt over one KV cache (:mod:`sleight.backends.sampling`)."""
        from sleight.backends.sampling import sample_hf

        return sample_hf(self, prompts, max_new_tokens, n, sampling, stop_token_ids)

    def stream(self, *, top_k: int = 20, live_rows: int | None = None, progress: Callable[[int], None] | None = None) -> GreedyStream:
        """Continuous batching over requests submitted as it runs (:class:`GreedyStream`)."""
        return GreedyStream(self, top_k=top_k, live_rows=live_rows or self.batch_size, progress=progress)


@dataclass
class _Request:
    gid: int
    prompts: list[list[int]]
    max_new: int
    hook: _HookFn | None
    forced: list[list[int]]
    row_offset: int
    priority: float = 0.0  # queued requests are admitted highest first (ties: first submitted first)
    joined: int = 0  # rows admitted so far (a ragged batch admits a request in pieces)
    shared: int = -1  # prompt tokens every row shares (-1: not computed yet)
    prefix: Prefix | None = None  # their keys and values, computed once, shared by every piece
    prefix_cache: Any = None  # the same as a slab cache, to fork for rows whose prompts differ after it

    @property
    def columns(self) -> int:
        """Cache columns a row may add past its prompt: its budget, its forced tokens, the prompt's last token."""
        return self.max_new + max(map(len, self.forced), default=0) + 1


_MIN_PIECE = 16  # a request's rows join a running ragged batch at least this many at a time (or all it has left)


class GreedyStream:
    """Lockstep greedy decoding with continuous batching: requests (a group of rows, a hook and a
    budget) join the running batch while it has room for all their rows, so the batch stays full as
    rows finish. Each request is prefilled on its own (the prefix its rows share once, forked) and
    its cache joins the batch's: the narrower one is padded on the left with masked columns, and
    columns that no live row attends to any more are dropped when a request joins. Iterating yields
    ``(request id, generations)`` as each request's last row ends.

    On a model whose attention is routed through :mod:`.ragged` the batch is ragged instead: each
    row keeps its own length, a request's rows join without padding (in pieces of at least
    ``_MIN_PIECE`` rows as rows retire, their shared prefix computed once and held once), each
    joining row fed its prompt's last token in the batch's next forward pass, and a retraction
    shortens its row. Otherwise joining a running batch needs a slab cache (:mod:`.kv_slab`), and
    other models run one request at a time. A request that joins an empty batch decodes exactly as
    a batch of its own would.
    """

    def __init__(self, model: HFModel, *, top_k: int, live_rows: int, progress: Callable[[int], None] | None) -> None:
        self.model, self.top_k, self.live_rows, self.progress = model, top_k, max(1, live_rows), progress
        self.state = _DecodeState(eos=model._eos)
        self.pending: deque[_Request] = deque()
        self.finished: deque[tuple[int, list[Generation]]] = deque()
        self.left: dict[int, int] = {}  # request id -> its rows still decoding
        self.logits: torch.Tensor | None = None
        self.cache: Any = None
        self.mask: torch.Tensor | None = None
        self.requests = 0
        self.peak_rows = 0
        self.peak_columns = 0
        self.ragged = bool(getattr(model, "_ragged", False))
        self.steps = 0  # forward passes of the batch
        self.columns_live = 0  # key columns one layer's attention read, summed over steps (a shared prefix once)
        self.columns_masked = 0  # ... and masked tail columns it read
        self._col = 0  # the step count, as the cache column of _DecodeState's book-keeping
        self._first: dict[int, int] = {}  # row -> the prompt token a joining row is fed first

    def submit(
        self,
        prompts: Sequence[Sequence[int]],
        max_new: int,
        *,
        hook: Hook | _HookFn | None = None,
        forced: Sequence[Sequence[int]] | None = None,
        row_offset: int = 0,
        priority: float = 0.0,
    ) -> int:
        """Queue a request; returns its id. The hook sees its rows as ``row_offset``, ``row_offset + 1``, ...
        Queued requests join highest ``priority`` first, a request already joining in pieces ahead
        of all (the scheduler admits long requests first, so the batch drains on short ones)."""
        if not prompts or any(len(p) == 0 for p in prompts):
            raise ValueError("a request needs rows with non-empty prompts")
        forced = forced or [[] for _ in prompts]
        if len(forced) != len(prompts):
            raise ValueError("a request needs one forced list per row")
        gid = self.requests
        self.requests += 1
        self.pending.append(_Request(gid, [list(p) for p in prompts], int(max_new), hook, [list(f) for f in forced], row_offset, float(priority)))
        self.reprioritize(gid, priority)
        return gid

    def reprioritize(self, gid: int, priority: float) -> None:
        """A queued request's new priority (none if it has begun to join or is not queued)."""
        for k, req in enumerate(self.pending):
            if req.gid == gid and not req.joined:
                del self.pending[k]
                req.priority = float(priority)
                at = len(self.pending)
                while at > 0 and self.pending[at - 1].priority < req.priority and not self.pending[at - 1].joined:
                    at -= 1
                self.pending.insert(at, req)
                return

    def __iter__(self) -> GreedyStream:
        return self

    def __next__(self) -> tuple[int, list[Generation]]:
        while not self.finished:
            if self.ragged:
                if not self.state.alive and not self.pending:
                    raise StopIteration
                self._step_ragged()
                continue
            self._admit()
            if not self.state.alive:
                raise StopIteration
            self._step()
        return self.finished.popleft()

    @property
    def live(self) -> int:
        return len(self.state.alive)

    def _admit(self) -> None:
        """Move queued requests into the batch while their rows fit (any request into an empty batch)."""
        while self.pending:
            req = self.pending[0]
            busy = self.live
            if busy and (busy + len(req.prompts) > self.live_rows or not self.model._slab):
                return
            self.pending.popleft()
            with torch.inference_mode():
                logits, cache, mask = self.model._prefill(req.prompts)
            if busy:
                self._join(logits, cache, mask)
            else:
                self.logits, self.cache, self.mask = logits, cache, mask
            self.state.add(req.forced, req.max_new, req.hook, req.row_offset, group=req.gid)
            self.left[req.gid] = len(req.prompts)
            self.peak_rows = max(self.peak_rows, self.live)

    def _join(self, logits: torch.Tensor, cache: Any, mask: torch.Tensor) -> None:
        assert self.mask is not None and self.logits is not None
        live = self.mask.any(0)
        dead = int(live.nonzero()[0]) if bool(live.any()) else self.mask.shape[1]
        if dead:  # columns no live row attends to: gone before the batch widens
            self.cache.drop_left(dead)
            self.mask = self.mask[:, dead:]
            self.state.shift(dead)
        width, extra = self.mask.shape[1], mask.shape[1]
        if width < extra:
            self.cache.pad_left(extra - width)
            self.mask = torch.cat([self.mask.new_zeros((self.mask.shape[0], extra - width)), self.mask], 1)
            self.state.shift(width - extra)
        elif extra < width:
            cache.pad_left(width - extra)
            mask = torch.cat([mask.new_zeros((mask.shape[0], width - extra)), mask], 1)
        self.cache.stack(cache)
        self.mask = torch.cat([self.mask, mask], 0)
        self.logits = torch.cat([self.logits, logits], 0)

    @torch.inference_mode()
    def _step(self) -> None:
        """One token for every live row: record, choose (hooks, edits), retire, feed the batch."""
        assert self.logits is not None and self.mask is not None
        st, dev = self.state, self.model.device
        records = _position_records(self.logits, self.top_k)
        proposals = records.greedy()  # one call for the batch, not one per row
        st.begin(records, col=self.mask.shape[1])
        for b, c in st.choose(proposals):
            self.mask[b, c] = 0
        fed = st.fed()
        self.mask = torch.cat([self.mask, torch.tensor(fed, dtype=torch.long, device=dev)[:, None]], 1)
        self.peak_columns = max(self.peak_columns, self.mask.shape[1])
        if self.progress:
            self.progress(sum(fed))
        before = list(st.alive)
        keep = st.retire()
        self._retired(before, keep)
        if not keep:
            self.logits = self.cache = self.mask = None
            return
        if len(keep) < self.mask.shape[0]:
            idx = torch.tensor(keep, device=dev)
            self.cache = _select_cache(self.cache, idx)
            self.mask = self.mask[idx]
        feed = [st.rows[r].out[-1] for r in st.alive]
        pos = (self.mask.sum(-1) - 1)[:, None]
        logits, self.cache = self.model._forward(torch.tensor(feed, device=dev)[:, None], self.mask, pos, self.cache, last_only=True)
        self.logits = logits[:, -1, :]

    def _retired(self, before: list[int], keep: list[int]) -> None:
        """Count the rows that left the batch (``before``'s positions not in ``keep``); a request
        whose last row left is finished."""
        st = self.state
        for b in sorted(set(range(len(before))) - set(keep)):
            gid = st.rows[before[b]].group
            self.left[gid] -= 1
            if not self.left[gid]:
                del self.left[gid]
                self.finished.append((gid, [row.generation(self.top_k) for row in st.rows if row.group == gid]))
                release_freed_memory()  # its rows' buffers: else the heap fragments and the resident set grows

    # -- ragged batches ------------------------------------------------------------------------
    @torch.inference_mode()
    def _step_ragged(self) -> None:
        """One token for every live row (records, choices, retractions, retirements), then rows of
        queued requests join, then one forward pass feeds every row, joining ones included."""
        st, dev = self.state, self.model.device
        if st.alive:
            assert self.logits is not None and isinstance(self.cache, RaggedCache)
            records = _position_records(self.logits, self.top_k)
            proposals = records.greedy()
            self._col += 1
            st.begin(records, col=self._col)
            for b, n in Counter(b for b, _ in st.choose(proposals)).items():
                self.cache.retract(b, n)  # the retracted tokens are the row's last ones: it gets shorter
            fed = st.fed()
            if self.progress:
                self.progress(sum(fed))
            before = list(st.alive)
            keep = st.retire()
            if not all(fed[b] for b in keep):
                raise RuntimeError("a live row accepted no token at this step")
            self._retired(before, keep)
            st.alive = [before[b] for b in self.cache.select(keep)]
        self._admit_ragged()
        if not st.alive:
            self.logits = self.cache = None
            return
        cache = self.cache
        assert isinstance(cache, RaggedCache)
        feed = [self._first.pop(r) if r in self._first else st.rows[r].out[-1] for r in st.alive]
        pos = cache.positions()
        cache.begin_step()
        live, masked = cache.columns_read()
        self.steps += 1
        self.columns_live += live
        self.columns_masked += masked
        self.peak_columns = max(self.peak_columns, max(pos) + 1)
        ids = torch.tensor(feed, device=dev)[:, None]
        logits, _ = self.model._forward(ids, None, torch.tensor(pos, device=dev)[:, None], cache, last_only=True)
        cache.end_step()
        self.logits = logits[:, -1, :]

    def _admit_ragged(self) -> None:
        """Rows of queued requests into the batch while there is room, a request in pieces of at
        least ``_MIN_PIECE`` rows (or all it has left; anything into an empty batch). Rows of
        one-row requests (and of requests sharing no prefix) that join together form one segment."""
        st = self.state
        plain: list[tuple[_Request, int, int, list[torch.Tensor], list[torch.Tensor], list[int]]] = []
        while self.pending:
            req = self.pending[0]
            busy = len(st.alive) + sum(len(p[5]) for p in plain)
            left = len(req.prompts) - req.joined
            take = min(left, self.live_rows - busy)
            if busy and (take <= 0 or (take < left and take < _MIN_PIECE)):
                break
            lo, hi = req.joined, req.joined + take
            own_k, own_v, lens = self._own_columns(req, lo, hi)
            if req.prefix is None or len(req.prompts) == 1:
                if req.prefix is not None:  # a row alone: its prompt is all its own
                    own_k = [torch.cat([p, o], -2) if o.shape[-2] else p for p, o in zip(req.prefix.keys, own_k)]
                    own_v = [torch.cat([p, o], -2) if o.shape[-2] else p for p, o in zip(req.prefix.values, own_v)]
                    lens = [n + req.prefix.length for n in lens]
                plain.append((req, lo, hi, own_k, own_v, lens))
            else:
                at = self._cache().add(req.prefix, lens, self._template(), own_k, own_v, rows=len(req.prompts) - lo, reserve=req.columns)
                self._join_rows(req, lo, hi, at)
            req.joined = hi
            if req.joined == len(req.prompts):
                self.pending.popleft()
                req.prefix = req.prefix_cache = None
        if plain:
            width = max(max(p[5]) for p in plain)
            pad = [self._pad_columns(p[3], width) for p in plain]
            padv = [self._pad_columns(p[4], width) for p in plain]
            n_layers = len(pad[0])
            self._cache().add(
                None,
                [n for p in plain for n in p[5]],
                self._template(),
                [torch.cat([k[layer] for k in pad], 0) for layer in range(n_layers)] if width else (),
                [torch.cat([v[layer] for v in padv], 0) for layer in range(n_layers)] if width else (),
                reserve=max(p[0].columns for p in plain),
            )
            for req, lo, hi, *_ in plain:
                self._join_rows(req, lo, hi)
        self.peak_rows = max(self.peak_rows, self.live)

    def _join_rows(self, req: _Request, lo: int, hi: int, at: int | None = None) -> None:
        """Rows ``lo:hi`` of ``req`` into the decode state, each to be fed its prompt's last token;
        ``at``: their batch position, where the cache put them (default: after every live row)."""
        if lo == 0:
            self.left[req.gid] = len(req.prompts)
        new = self.state.add(req.forced[lo:hi], req.max_new, req.hook, req.row_offset + lo, group=req.gid)
        alive = self.state.alive
        if at is not None and at < len(alive) - len(new):
            self.state.alive = alive[:at] + new + alive[at : len(alive) - len(new)]
        for r, prompt in zip(new, req.prompts[lo:hi]):
            self._first[r] = prompt[-1]

    def _cache(self) -> RaggedCache:
        if self.cache is None:
            self.cache = RaggedCache(len(self._template_layers()))
        assert isinstance(self.cache, RaggedCache)
        return self.cache

    def _template_layers(self) -> list[int]:
        cfg = self.model.model.config
        text = cfg.get_text_config(decoder=True) if hasattr(cfg, "get_text_config") else cfg
        return list(range(int(text.num_hidden_layers)))

    def _template(self) -> torch.Tensor:
        """An empty key tensor of the model's shape, dtype and device."""
        cfg = self.model.model.config
        text = cfg.get_text_config(decoder=True) if hasattr(cfg, "get_text_config") else cfg
        heads = int(text.num_attention_heads)
        dim = int(getattr(text, "head_dim", None) or text.hidden_size // heads)
        kv = int(getattr(text, "num_key_value_heads", None) or heads)
        w = self.model.model.get_output_embeddings().weight
        return torch.empty((1, kv, 0, dim), dtype=w.dtype, device=w.device)

    @staticmethod
    def _pad_columns(ts: list[torch.Tensor], width: int) -> list[torch.Tensor]:
        return [t if t.shape[-2] == width else torch.cat([t, t.new_zeros((*t.shape[:2], width - t.shape[-2], t.shape[-1]))], -2) for t in ts]

    def _own_columns(self, req: _Request, lo: int, hi: int) -> tuple[list[torch.Tensor], list[torch.Tensor], list[int]]:
        """The keys and values of rows ``lo:hi``'s prompts after the request's shared prefix, but
        their last token (fed in the batch's next step): per layer ``(rows, kv_heads, columns,
        head_dim)``, row ``i``'s first ``lens[i]`` columns. The shared prefix is computed at batch 1
        on the request's first piece."""
        model, dev = self.model, self.model.device
        if req.shared < 0:
            req.shared = max(0, min(_common_prefix_len(req.prompts), min(len(p) for p in req.prompts) - 1))
            if req.shared:
                ids = torch.tensor([req.prompts[0][: req.shared]], device=dev)
                _, pc = model._forward(ids, torch.ones_like(ids), torch.arange(req.shared, device=dev)[None], last_only=True)
                req.prefix_cache = pc
                kv = [_layer_kv(layer) for layer in pc.layers]
                req.prefix = Prefix([k.clone() for k, _ in kv], [v.clone() for _, v in kv])
        rows = [p[req.shared : -1] for p in req.prompts[lo:hi]]
        lens = [len(r) for r in rows]
        n_layers = len(self._template_layers())
        if not any(lens):
            t = self._template()
            empty = t.new_zeros((hi - lo, *t.shape[1:]))
            return [empty] * n_layers, [empty] * n_layers, lens
        # Rows whose prompts differ after the shared prefix: their own tokens, left-padded, over a fork of it.
        take = hi - lo
        fork = _repeat_cache(req.prefix_cache, take) if req.prefix_cache is not None else None
        tid, tmask, _ = model._padded(rows, "left")
        pos = req.shared + (tmask.cumsum(-1) - 1).clamp(min=0)
        mask = torch.cat([torch.ones((take, req.shared), dtype=torch.long, device=dev), tmask], 1)
        _, cache = model._forward(tid, mask, pos, fork, last_only=True)
        width = tid.shape[1]
        own_k, own_v = [], []
        for layer in cache.layers:
            k, v = (t[:, :, req.shared :] for t in _layer_kv(layer))
            ok, ov = k.new_zeros(k.shape), v.new_zeros(v.shape)
            for i, n in enumerate(lens):
                if n:
                    ok[i, :, :n] = k[i, :, width - n :]
                    ov[i, :, :n] = v[i, :, width - n :]
            own_k.append(ok)
            own_v.append(ov)
        return own_k, own_v, lens


def cache_kwarg(model: torch.nn.Module) -> str:
    """The name under which this transformers takes the KV cache: ``cache`` from 5.20 on (where
    ``past_key_values`` is deprecated), ``past_key_values`` before. A wrong name is swallowed by
    ``**kwargs`` and the model silently runs without its cache, so the name is read, not assumed."""
    import inspect

    names = inspect.signature(model.forward).parameters
    for name in ("cache", "past_key_values"):
        if name in names:
            return name
    raise UserError(f"{type(model).__name__}.forward takes neither 'cache' nor 'past_key_values': this transformers is not supported")


def _common_prefix_len(seqs: Sequence[Sequence[int]]) -> int:
    first = seqs[0]
    n = len(first)
    for s in seqs[1:]:
        m = min(n, len(s))
        i = 0
        while i < m and s[i] == first[i]:
            i += 1
        n = i
    return n


def _repeat_cache(cache: Cache, n: int, copy: bool = True) -> Cache:
    """Fork a batch-1 cache into ``n`` rows (a copy per row, the prefix is not recomputed)."""
    import copy as _copy

    forked = _copy.deepcopy(cache) if copy else cache
    if n > 1:
        forked.batch_repeat_interleave(n)
    return forked


def _layer_kv(layer: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """A filled cache layer's keys and values."""
    k, v = layer.keys, layer.values
    assert isinstance(k, torch.Tensor) and isinstance(v, torch.Tensor)
    return k, v


def _select_cache(cache: Cache, idx: torch.Tensor) -> Cache:
    cache.batch_select_indices(idx)
    return cache
