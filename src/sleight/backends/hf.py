"""transformers engine (CPU or CUDA): the default, and the reference for every other engine.

Decoding runs all rows of a batch in lockstep over one KV cache. A prefix that every row shares is
computed once and its cache repeated across the batch (forked, not recomputed). Rows are padded
with masked positions and carry explicit ``position_ids``, so a pad or a retracted token can sit
anywhere in a row, not only at its left end.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from sleight.backends.base import Completion, Edit, Generation, Hook, ModelInfo, NextToken, Scored, sha256_text
from sleight.backends.resolve import ResolvedModel
from sleight.backends.tokens import HFTokenizerOps
from sleight.errors import UserError


def pick_device(device: str | None) -> str:
    if device and device != "auto":
        if device.startswith("cuda") and not torch.cuda.is_available():
            raise UserError(f"device '{device}' requested but CUDA is not available here")
        return device
    return "cuda" if torch.cuda.is_available() else "cpu"


_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


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

    def accept(self, tok: int, lp: float, tids: np.ndarray, tlp: np.ndarray, ent: float, forced: bool, step: int) -> None:
        self.out.append(tok)
        self.lp.append(lp)
        self.top_ids.append(tids)
        self.top_lp.append(tlp)
        self.ent.append(ent)
        self.forced.append(forced)
        self.dist_step.append(step)

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
        )

    def retract(self, n: int) -> list[int]:
        """Withdraw the last ``n`` accepted tokens; returns their cache columns to mask."""
        cols = self.cache_pos[len(self.cache_pos) - n :] if n else []
        if n:
            for seq in (self.out, self.lp, self.top_ids, self.top_lp, self.ent, self.forced, self.cache_pos, self.dist_step):
                del seq[len(seq) - n :]
        return cols


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
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(resolved.load_path)
            self.model = AutoModelForCausalLM.from_pretrained(resolved.load_path, dtype=_DTYPES[dtype])
        except OSError as exc:
            raise UserError(f"could not load model '{resolved.spec}': {exc}") from None
        self._cache_kwarg = cache_kwarg(self.model)
        self.model.to(self.device).eval()  # type: ignore[arg-type]  # transformers types .to() as a decorator
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
        )

    # -- forward passes ------------------------------------------------------------------------
    @torch.inference_mode()
    def _forward(self, ids: torch.Tensor, mask: torch.Tensor, pos: torch.Tensor, cache=None, last_only: bool = False, keep: int = 0):
        """One forward pass; ``last_only`` computes the output layer at the last position only
        (a (batch, seq, vocab) logits tensor is the biggest allocation of a long prompt), ``keep``
        at the last ``keep`` positions."""
        keep = 1 if last_only else keep
        extra = {"logits_to_keep": keep} if keep else {}
        extra[self._cache_kwarg] = cache
        out = self.model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True, **extra)
        return out.logits, getattr(out, "cache", None) or out.past_key_values

    def _padded(self, seqs: Sequence[Sequence[int]], side: str = "left"):
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
            lp = torch.log_softmax(logits[:, -1, :].float(), dim=-1)
            ent = (-(lp.exp() * lp).nan_to_num().sum(-1)).cpu().numpy()
            tv_t, ti_t = torch.topk(lp, min(top_k, lp.shape[-1]), dim=-1) if top_k > 0 else (lp[:, :0], lp[:, :0].long())
            tv, ti = tv_t.double().cpu().numpy(), ti_t.cpu().numpy()
            for b, want in enumerate(asked[start : start + self.batch_size]):
                got = lp[b, torch.tensor(list(want), dtype=torch.long, device=lp.device)] if want else lp[b, :0]
                out.append(NextToken(got.double().cpu().numpy(), ti[b].astype(np.int64), tv[b], float(ent[b])))
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
        h_lp, h_ids, h_top, h_ent = _position_records(logits[0], top_k)
        parts: dict[int, list[tuple[np.ndarray, ...]]] = {}
        for b, i in enumerate(live):
            toks = full[b][len(ctx) : len(ctx) + head]
            idx = torch.arange(len(toks), device=self.device)
            tok_lp = h_lp[idx, torch.tensor(toks, device=self.device)]
            parts[i] = [(tok_lp.double().cpu().numpy(), h_ids[: len(toks)], h_top[: len(toks)], h_ent[: len(toks)])]
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
                lp = torch.log_softmax(tlogits.float(), dim=-1)
                ent = (-(lp.exp() * lp).nan_to_num().sum(-1)).cpu().numpy()
                tv_t, ti_t = torch.topk(lp, top_k, dim=-1)
                want, _, _ = self._padded([t[2] for t in chunk], "right")
                tok_lp = lp.gather(-1, want[..., None])[..., 0].double().cpu().numpy()
                ti, tv = ti_t.cpu().numpy(), tv_t.cpu().numpy()
                for b, (i, fed, _) in enumerate(chunk):
                    n = len(fed)
                    parts[i].append((tok_lp[b, :n], ti[b, :n], tv[b, :n], ent[b, :n]))
                del lp, tlogits
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
    def _until_batch(self, prompts, budgets, stops, stop_strs, progress) -> list[Completion]:
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

    def _prefill(self, prompts: Sequence[Sequence[int]]):
        """The prompts' forward pass: the prefix they all share once at batch 1, its cache forked,
        then each row's own suffix left-padded after it with explicit positions. Returns the last
        position's logits, the cache and the attention mask."""
        n = len(prompts)
        dev = self.device
        # Each row keeps >= 1 token of its own, so every row has a last position of its own.
        shared = min(_common_prefix_len(prompts), min(len(p) for p in prompts) - 1)
        cache = None
        mask = torch.zeros((n, 0), dtype=torch.long, device=dev)
        if shared > 0:
            ids = torch.tensor([list(prompts[0][:shared])], device=dev)
            _, cache = self._forward(ids, torch.ones_like(ids), torch.arange(shared, device=dev)[None], last_only=True)
            cache = _repeat_cache(cache, n, copy=False)
            mask = torch.ones((n, shared), dtype=torch.long, device=dev)
        tid, tmask, _ = self._padded([p[shared:] for p in prompts], "left")
        pos = shared + (tmask.cumsum(-1) - 1).clamp(min=0)
        mask = torch.cat([mask, tmask], 1)
        logits, cache = self._forward(tid, mask, pos, cache, last_only=True)
        return logits[:, -1, :], cache, mask

    def greedy(
        self,
        prompts: Sequence[Sequence[int]],
        max_new_tokens: int,
        *,
        hook: Hook | Callable[[int, Sequence[int], int | None], Edit | None] | None = None,
        forced: Sequence[Sequence[int]] | None = None,
        top_k: int = 20,
        progress: Callable[[int], None] | None = None,
    ) -> list[Generation]:
        if not prompts:
            return []
        if any(len(p) == 0 for p in prompts):
            raise ValueError("greedy needs non-empty prompts")
        forced = forced or [[] for _ in prompts]
        out: list[Generation] = []
        for start in range(0, len(prompts), self.batch_size):
            sl = slice(start, start + self.batch_size)
            out.extend(
                self._greedy_batch(
                    list(prompts[sl]), max_new_tokens, hook, list(forced[sl]), top_k, progress, row_offset=start
                )
            )
        return out

    @torch.inference_mode()
    def _greedy_batch(self, prompts, max_new, hook, forced, top_k, progress, row_offset):
        n = len(prompts)
        dev = self.device
        logits, cache, mask = self._prefill(prompts)

        rows = [_Row(queue=list(f)[:max_new]) for f in forced]
        alive = list(range(n))  # original row of each live batch position
        history: dict[int, tuple[torch.Tensor, dict[int, int]]] = {}  # step -> (log-probs, row -> batch)
        step = 0
        while alive:
            lp = torch.log_softmax(logits.float(), dim=-1)
            ent = -(lp.exp() * lp).nan_to_num().sum(-1)
            tv, ti = torch.topk(lp, top_k, dim=-1)
            dist = _StepDist(step, lp, ti.cpu().numpy(), tv.cpu().numpy(), ent.cpu().numpy())
            greedy_ids = lp.argmax(-1).tolist()  # one call for the batch, not one per row
            history[step] = (lp, {r: b for b, r in enumerate(alive)})
            history.pop(step - _RETRACT_WINDOW, None)
            col = mask.shape[1]  # the cache column a token fed now will occupy
            mask_off: list[tuple[int, int]] = []
            for b, r in enumerate(alive):
                row = rows[r]
                if row.queue:
                    dist.accept(row, b, row.queue.pop(0), True, col)
                else:
                    proposed = int(greedy_ids[b])
                    edit = hook(r + row_offset, row.out, proposed) if hook else None
                    if edit is not None:
                        self._apply_edit(row, edit, max_new, b, dist, history, r, col, mask_off)
                    elif proposed in self._eos:
                        row.done, row.finish = True, "stop"
                    else:
                        dist.accept(row, b, proposed, False, col)
                if not row.done and len(row.out) >= max_new and not row.queue:
                    # The budget is spent: one last look for the hook (a trigger pending at the end).
                    edit = hook(r + row_offset, row.out, None) if hook and not row.end_checked else None
                    row.end_checked = True
                    if edit is not None:
                        self._apply_edit(row, edit, max_new, b, dist, history, r, col, mask_off)
                    if not row.queue:
                        row.done, row.finish = True, "length"
            fed = [bool(rows[r].cache_pos) and rows[r].cache_pos[-1] == col for r in alive]
            for b, c in mask_off:
                mask[b, c] = 0
            mask = torch.cat([mask, torch.tensor(fed, dtype=torch.long, device=dev)[:, None]], 1)
            if progress:
                progress(sum(fed))
            step += 1
            keep = [b for b, r in enumerate(alive) if not rows[r].done]
            if not keep:
                break
            feed = [rows[alive[b]].out[-1] for b in keep]
            if len(keep) < len(alive):
                idx = torch.tensor(keep, device=dev)
                cache = _select_cache(cache, idx)
                mask = mask[idx]
                alive = [alive[b] for b in keep]
            pos = (mask.sum(-1) - 1)[:, None]
            logits, cache = self._forward(torch.tensor(feed, device=dev)[:, None], mask, pos, cache, last_only=True)
            logits = logits[:, -1, :]
        return [row.generation(top_k) for row in rows]

    def _apply_edit(self, row: _Row, edit: Edit, max_new: int, b: int, dist: _StepDist, history, r: int, col: int, mask_off) -> None:
        """Retract, then accept the first forced token now and queue the rest (within the budget).

        The first forced token takes the position of the first retracted one, so its log-prob is
        read from the distribution that was kept for that position: nothing is recomputed.
        """
        n_back = min(edit.retract, len(row.out))
        src = dist
        src_b = b
        if n_back:
            i = len(row.out) - n_back
            step = row.dist_step[i]
            if step != dist.step:
                if step not in history or r not in history[step][1]:
                    raise RuntimeError(f"edit retracts {n_back} tokens, past the kept window of {_RETRACT_WINDOW}")
                lp, where = history[step]
                src_b = where[r]
                src = _StepDist(step, lp, None, None, None, top=(row.top_ids[i], row.top_lp[i], row.ent[i]))
            for c in row.retract(n_back):
                if c != col:
                    mask_off.append((b, c))
        force = list(edit.force)[: max(max_new - len(row.out), 0)]
        if not force:
            row.done, row.finish = True, "length"
            return
        src.accept(row, src_b, force[0], True, col)
        row.edits.append(len(row.out) - 1)
        row.queue = force[1:]


_SCORE_BYTES = 1 << 30  # bound on a scoring pass's logits and the tensors derived from them
_RETRACT_WINDOW = 6  # steps of full distributions kept, so an edit may retract up to 5 tokens


class _StepDist:
    """The distribution of one decode step, and how a token accepted from it is recorded."""

    def __init__(self, step, lp, top_ids, top_lp, ent, top=None):
        self.step, self.lp, self.top_ids, self.top_lp, self.ent, self.top = step, lp, top_ids, top_lp, ent, top

    def accept(self, row: _Row, b: int, tok: int, forced: bool, col: int) -> None:
        tids, tlp, ent = self.top if self.top is not None else (self.top_ids[b], self.top_lp[b], float(self.ent[b]))
        row.accept(tok, float(self.lp[b, tok]), tids, tlp, ent, forced, self.step)
        row.cache_pos.append(col)


def _position_records(logits: torch.Tensor, top_k: int):
    """(seq, vocab) logits -> the log-softmax (kept on the device) and, on the host, top-k ids and
    log-probs and the exact entropy per position: the formulas the lockstep decoder records with."""
    lp = torch.log_softmax(logits.float(), dim=-1)
    ent = (-(lp.exp() * lp).nan_to_num().sum(-1)).cpu().numpy()
    tv, ti = torch.topk(lp, top_k, dim=-1)
    return lp, ti.cpu().numpy(), tv.cpu().numpy(), ent


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


def _repeat_cache(cache, n: int, copy: bool = True):
    """Fork a batch-1 cache into ``n`` rows (a copy per row, the prefix is not recomputed)."""
    import copy as _copy

    forked = _copy.deepcopy(cache) if copy else cache
    if n > 1:
        forked.batch_repeat_interleave(n)
    return forked


def _select_cache(cache, idx: torch.Tensor):
    cache.batch_select_indices(idx)
    return cache

