"""transformers engine (CPU or CUDA): the default, and the reference for every other engine.

Decoding runs all rows of a batch in lockstep over one KV cache. A prefix that every row shares is
computed once and its cache repeated across the batch (forked, not recomputed). Rows are padded
with masked positions and carry explicit ``position_ids``, so a pad or a retracted token can sit
anywhere in a row, not only at its left end. This module holds the engine (loading, forward passes,
scoring, plain generation); greedy decoding with edits runs through :mod:`.decode_stream`, seeded
sampling through :mod:`.sampling`, and both over the engine's public passes (:meth:`HFModel.forward`,
:meth:`HFModel.prefill`) with the cache operations of :mod:`.cache_ops`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np
import torch

from sleight.backends.base import (
    Completion,
    Decoding,
    Generation,
    Hook,
    HookFn,
    NextToken,
    Sample,
    Sampling,
    Scored,
    check_continuations,
    check_reads,
)
from sleight.backends.cache_ops import cache_kwarg, common_prefix_len, repeat_cache, select_cache
from sleight.backends.decode_state import position_records
from sleight.backends.decode_stream import GreedyStream
from sleight.backends.kv_slab import SlabCache, slab_supported
from sleight.backends.ragged import RaggedCache
from sleight.backends.ragged import register as register_ragged
from sleight.backends.resolve import ResolvedModel
from sleight.backends.tokens import HFTokenizerOps, check_template_kwargs
from sleight.errors import UserError

if TYPE_CHECKING:
    from transformers import Cache


def pick_device(device: str | None) -> str:
    if device and device != "auto":
        if device.startswith("cuda") and not torch.cuda.is_available():
            raise UserError(f"device '{device}' requested but CUDA is not available here")
        return device
    return "cuda" if torch.cuda.is_available() else "cpu"


_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
_SCORE_BYTES = 1 << 30  # bound on a scoring pass's logits and the tensors derived from them


class HFModel(HFTokenizerOps, Decoding):
    """A transformers causal LM behind :class:`sleight.backends.base.LanguageModel`."""

    def __init__(
        self,
        resolved: ResolvedModel,
        *,
        device: str | None = None,
        dtype: str = "float32",
        batch_size: int = 128,
        threads: int | None = None,
        chat_template_kwargs: Mapping[str, object] | None = None,
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
        self.slab = slab_supported(self.model.config)
        # Ragged batches (rows of their own lengths, attention over live columns only) where the
        # model runs transformers' SDPA attention: :mod:`.ragged`. Other calls run SDPA unchanged.
        self.ragged = self.slab and register_ragged(self.model)
        self._vocab = int(self.model.get_output_embeddings().weight.shape[0])
        eos = self.model.generation_config.eos_token_id
        eos = [eos] if isinstance(eos, int) else list(eos or [])
        if self.tokenizer.eos_token_id is not None:
            eos.append(self.tokenizer.eos_token_id)
        self._eos = frozenset(eos)
        self._pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else min(self._eos)
        self.info = self.loaded_info(
            resolved,
            engine="hf",
            engine_version=f"transformers {transformers.__version__}, torch {torch.__version__}",
            dtype=dtype,
            device=self.device,
            batch_size=batch_size,
            threads=torch.get_num_threads(),
        )

    # -- forward passes ------------------------------------------------------------------------
    @torch.inference_mode()
    def forward(
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
        extra: dict[str, object] = {"logits_to_keep": keep} if keep else {}
        extra[self._cache_kwarg] = cache if cache is not None or not self.slab else SlabCache()
        if isinstance(cache, RaggedCache):
            extra["ragged"] = cache  # read by ragged.ragged_attention; no mask is built
        out = self.model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True, **extra)
        return out.logits, getattr(out, "cache", None) or out.past_key_values

    def padded(self, seqs: Sequence[Sequence[int]], side: str = "left") -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
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
            ids, mask, pos = self.padded(chunk, "left")
            logits, _ = self.forward(ids, mask, pos, last_only=True)
            rows.append(torch.log_softmax(logits[:, -1, :].float(), dim=-1).cpu().numpy())
        return np.concatenate(rows, axis=0)

    def read_next(
        self, seqs: Sequence[Sequence[int]], asked: Sequence[Sequence[int]], *, top_k: int = 20
    ) -> list[NextToken]:
        check_reads(seqs, asked)
        out: list[NextToken] = []
        for start in range(0, len(seqs), self.batch_size):
            chunk = seqs[start : start + self.batch_size]
            ids, mask, pos = self.padded(chunk, "left")
            logits, _ = self.forward(ids, mask, pos, last_only=True)
            out += position_records(logits[:, -1, :], top_k).next_tokens(asked[start : start + self.batch_size])
        return out

    def read_forks(
        self, prefixes: Sequence[Sequence[int]], tails: Sequence[Sequence[Sequence[int]]], asked: Sequence[Sequence[int]], *, top_k: int = 20
    ) -> list[NextToken]:
        """Read as a tree: what every prefix shares (a judge's instructions up to the case) once, then
        each prefix alone from that cache (one row, no padding: on a CPU a padded batch of prompts of
        unequal lengths reads slower than its rows one by one), then its tails together, forked from
        its cache. The numbers of reading every ``prefix + tail`` whole, within float32 rounding."""
        if len(tails) != len(prefixes) or len(asked) != sum(len(t) for t in tails):
            raise ValueError("read_forks needs the tails of every prefix and one list of asked ids per tail")
        if any(not p for p in prefixes) or any(not t for ts in tails for t in ts):
            raise ValueError("read_forks needs non-empty prefixes and tails")
        shared = min(common_prefix_len(prefixes), min(len(p) for p in prefixes) - 1)
        base = self.forward(*self.padded([prefixes[0][:shared]]), last_only=True)[1] if shared else None
        out: list[NextToken] = []
        for g, prefix in enumerate(prefixes):
            at = len(out)
            rest = torch.tensor([list(prefix[shared:])], dtype=torch.long, device=self.device)
            pos = torch.arange(shared, len(prefix), device=self.device)[None]
            cache = repeat_cache(base, 1) if base is not None else None
            _, cache = self.forward(rest, torch.ones((1, len(prefix)), dtype=torch.long, device=self.device), pos, cache, last_only=True)
            n = len(tails[g])
            mask = torch.ones((n, len(prefix)), dtype=torch.long, device=self.device)
            out += self._read_tails(repeat_cache(cache, n, copy=False), mask, tails[g], asked[at : at + n], top_k)
        return out

    def _read_tails(
        self, cache: Cache, prefix_mask: torch.Tensor, tails: Sequence[Sequence[int]], asked: Sequence[Sequence[int]], top_k: int
    ) -> list[NextToken]:
        """One tail a cached prefix row, read at the tail's last token."""
        tid, tmask, _ = self.padded(tails, "right")
        tpos = prefix_mask.sum(-1, keepdim=True) + torch.arange(tid.shape[1], device=self.device)
        logits, _ = self.forward(tid, torch.cat([prefix_mask, tmask], 1), tpos, cache, keep=tid.shape[1])
        last = torch.tensor([len(t) - 1 for t in tails], device=self.device)
        return position_records(logits[torch.arange(len(tails), device=self.device), last], top_k).next_tokens(asked)

    def next_token_logits(self, seqs: Sequence[Sequence[int]]) -> np.ndarray:
        """Raw logits at the end of each sequence (for readouts that reproduce a library's own
        post-processing of logits, such as lm-polygraph's sanitiser)."""
        rows = []
        for start in range(0, len(seqs), self.batch_size):
            ids, mask, pos = self.padded(seqs[start : start + self.batch_size], "left")
            logits, _ = self.forward(ids, mask, pos, last_only=True)
            rows.append(logits[:, -1, :].float().cpu().numpy())
        return np.concatenate(rows, axis=0)

    def continuation_logprobs(
        self, context: Sequence[int], continuations: Sequence[Sequence[int]]
    ) -> list[np.ndarray]:
        check_continuations(context, continuations)
        # The context is computed once; its cache is repeated across the continuations.
        ids, mask, pos = self.padded([context])
        logits, cache = self.forward(ids, mask, pos, last_only=True)
        return self._continue(context, logits, cache, continuations)

    def read_scored(
        self, context: Sequence[int], asked: Sequence[int], continuations: Sequence[Sequence[int]], *, top_k: int = 20
    ) -> tuple[NextToken, list[np.ndarray]]:
        """The next position's record and the continuations' log-probs from one pass over the
        context (:class:`~sleight.backends.base.ScoredReads`), at batch 1 as ``continuation_logprobs``."""
        check_reads([context], [asked])
        check_continuations(context, continuations)
        ids, mask, pos = self.padded([context])
        logits, cache = self.forward(ids, mask, pos, last_only=True)
        record = position_records(logits[:, -1, :], top_k).next_tokens([asked])[0]
        return record, self._continue(context, logits, cache, continuations) if continuations else []

    @torch.inference_mode()
    def _continue(self, context: Sequence[int], logits: torch.Tensor, cache: Cache, continuations: Sequence[Sequence[int]]) -> list[np.ndarray]:
        """Each continuation's per-token log-probs after ``context``, whose last logits and cache
        are given: the first token from those logits, the rest from the cache repeated per row."""
        results: list[np.ndarray] = []
        first = torch.log_softmax(logits[0, -1, :].float(), dim=-1)
        for start in range(0, len(continuations), self.batch_size):
            chunk = continuations[start : start + self.batch_size]
            tails = [list(c[:-1]) for c in chunk]
            per = [[float(first[c[0]])] for c in chunk]
            if any(tails):
                tid, tmask, _ = self.padded(tails, "right")
                ctx_mask = torch.ones((len(chunk), len(context)), dtype=torch.long, device=self.device)
                tpos = len(context) + torch.arange(tid.shape[1], device=self.device).expand(len(chunk), -1)
                tlogits, _ = self.forward(tid, torch.cat([ctx_mask, tmask], 1), tpos, repeat_cache(cache, len(chunk)))
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
        shared = common_prefix_len(full)
        head = shared - len(ctx) + 1
        ids = torch.tensor([full[0][:shared]], device=self.device)
        logits, cache = self.forward(ids, torch.ones_like(ids), torch.arange(shared, device=self.device)[None], keep=head)
        h = position_records(logits[0], top_k)
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
                tid, tmask, _ = self.padded([t[1] for t in chunk], "right")
                pre = torch.ones((len(chunk), shared), dtype=torch.long, device=self.device)
                tpos = shared + torch.arange(tid.shape[1], device=self.device).expand(len(chunk), -1)
                tlogits, _ = self.forward(tid, torch.cat([pre, tmask], 1), tpos, repeat_cache(cache, len(chunk)))
                rec = position_records(tlogits, top_k)
                want, _, _ = self.padded([t[2] for t in chunk], "right")
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
    def until_rows(
        self, prompts: Sequence[Sequence[int]], budgets: Sequence[int], stop_token_ids: Sequence[int], stop: Sequence[str],
        progress: Callable[[int], None] | None,
    ) -> list[Completion]:  # fmt: skip
        """Batched lockstep greedy with no records: the hf side of two-phase decoding."""
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
        logits, cache, mask = self.prefill(prompts)
        alive = list(range(n))
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
                cache = select_cache(cache, idx)
                mask = mask[idx]
                alive = [alive[b] for b in keep]
            pos = (mask.sum(-1) - 1)[:, None]
            logits, cache = self.forward(torch.tensor(feed, device=self.device)[:, None], mask, pos, cache, last_only=True)
            logits = logits[:, -1, :]
        return [Completion(o, f) for o, f in zip(outs, finish)]

    def prefill(self, prompts: Sequence[Sequence[int]]) -> tuple[torch.Tensor, Cache, torch.Tensor]:
        """The prompts' forward pass: the prefix they all share once at batch 1, its cache forked,
        then each row's own suffix left-padded after it with explicit positions. Returns the last
        position's logits, the cache and the attention mask."""
        n = len(prompts)
        dev = self.device
        # Each row keeps >= 1 token of its own, so every row has a last position of its own.
        shared = min(common_prefix_len(prompts), min(len(p) for p in prompts) - 1)
        cache: Cache | None = None
        mask = torch.zeros((n, 0), dtype=torch.long, device=dev)
        if shared > 0:
            ids = torch.tensor([list(prompts[0][:shared])], device=dev)
            _, prefix = self.forward(ids, torch.ones_like(ids), torch.arange(shared, device=dev)[None], last_only=True)
            cache = repeat_cache(prefix, n, copy=False)
            mask = torch.ones((n, shared), dtype=torch.long, device=dev)
        tid, tmask, _ = self.padded([p[shared:] for p in prompts], "left")
        pos = shared + (tmask.cumsum(-1) - 1).clamp(min=0)
        mask = torch.cat([mask, tmask], 1)
        logits, out_cache = self.forward(tid, mask, pos, cache, last_only=True)
        return logits[:, -1, :], out_cache, mask

    def greedy_rows(
        self, prompts: Sequence[Sequence[int]], max_new_tokens: int, hook: Hook | HookFn | None, forced: Sequence[Sequence[int]],
        top_k: int, progress: Callable[[int], None] | None,
    ) -> list[Generation]:  # fmt: skip
        """Rows in batches of ``batch_size``, one batch after the other (each a request of its own
        to an empty :class:`GreedyStream`)."""
        out: list[Generation] = []
        for start in range(0, len(prompts), self.batch_size):
            sl = slice(start, start + self.batch_size)
            stream = self.stream(top_k=top_k, live_rows=self.batch_size, progress=progress)
            stream.submit(prompts[sl], max_new_tokens, hook=hook, forced=forced[sl], row_offset=start)
            out.extend(g for _, gens in stream for g in gens)
        return out

    def sample_rows(
        self, prompts: Sequence[Sequence[int]], max_new_tokens: int, n: int, sampling: Sampling, stop_token_ids: Sequence[int]
    ) -> list[list[Sample]]:
        """``n`` seeded samples of each prompt over one KV cache (:mod:`sleight.backends.sampling`)."""
        from sleight.backends.sampling import sample_hf

        return sample_hf(self, prompts, max_new_tokens, n, sampling, stop_token_ids)

    def stream(self, *, top_k: int = 20, live_rows: int | None = None, progress: Callable[[int], None] | None = None) -> GreedyStream:
        """Continuous batching over requests submitted as it runs (:class:`GreedyStream`)."""
        return GreedyStream(self, top_k=top_k, live_rows=live_rows or self.batch_size, progress=progress)
