"""The sweep order (continuous batching over questions) against the question-by-question order, on the
bundled model: the same trials token for token, the same records within the engine's noise."""

from __future__ import annotations

import numpy as np
import pytest

from sleight.backends import spec_of
from sleight.backends.kv_slab import SlabCache
from sleight.tamper.data import load_questions, load_substitutes
from sleight.tamper.engine import TamperConfig
from sleight.tamper.job import plan_run
from sleight.tamper.runner import run_tamper
from sleight.tamper.store import load_clean, load_manifest, load_trials
from tolerances import ENTROPY_ATOL, FLOAT16_STORED_RTOL, LOGPROB_ATOL

N_Q, N_SUBS, BUDGET, LIVE = 4, 6, 40, 10  # 6-row requests under 10 live rows: requests join running batches


@pytest.fixture(scope="module")
def two_orders(model, tmp_path_factory):
    qs, qsrc = load_questions(limit=N_Q)
    subs, ssrc = load_substitutes(limit=N_SUBS)
    cfg = TamperConfig(max_new_tokens=BUDGET)
    out = {}
    for schedule in ("question", "sweep"):
        d = tmp_path_factory.mktemp(schedule)
        prep = plan_run(spec_of(model), qs, subs, d, cfg, sources=(qsrc, ssrc))
        s = run_tamper(model, prep, progress=False, schedule=schedule, live_rows=LIVE)
        assert s.schedule == schedule
        out[schedule] = d
    return out


def _flat(frame, col):
    return np.concatenate([np.ravel(np.stack(list(v))) if len(v) and np.ndim(v[0]) else np.asarray(v, dtype=float) for v in frame[col]]).astype(float)


def _assert_same_top20(a, b) -> None:
    """The top-20 of every step is the same ranking in both orders, up to entries whose log-probs tie
    within the engine's noise: two rows of different batches may order a near-tie differently (seen
    on an AVX2 CPU, where the sweep's larger batches pick other kernels), so an id may only change
    place with one whose log-prob is within the stored tolerance of its own, or leave at the 20th
    place for one tied with it there."""
    tol = lambda lp: LOGPROB_ATOL + FLOAT16_STORED_RTOL * abs(lp)  # noqa: E731
    for (ra, rb, la, lb) in zip(a["top20_ids"], b["top20_ids"], a["top20_logprobs"], b["top20_logprobs"]):
        for ids_a, ids_b, lp_a, lp_b in zip(ra, rb, la, lb):
            ids_a, ids_b, lp_a, lp_b = (np.asarray(x) for x in (ids_a, ids_b, lp_a, lp_b))
            np.testing.assert_allclose(lp_b, lp_a, rtol=FLOAT16_STORED_RTOL, atol=LOGPROB_ATOL)  # the same values, in order
            for j in np.nonzero(ids_a != ids_b)[0]:
                where = np.nonzero(ids_b == ids_a[j])[0]
                other = lp_b[where[0]] if len(where) else lp_b[-1]  # moved within the top-20, or out at its boundary
                assert abs(float(lp_a[j]) - float(other)) <= 2 * tol(float(lp_a[j])), (ids_a.tolist(), ids_b.tolist(), lp_a.tolist(), lp_b.tolist())


def test_sweep_order_gives_the_question_orders_trials(two_orders):
    a, b = (load_trials(two_orders[s]).sort_values(["question_index", "substitute_index"]).reset_index(drop=True) for s in ("question", "sweep"))
    assert len(a) == len(b) == N_Q * N_SUBS
    for col in ("token_ids", "injected", "swap_steps", "swap_ids"):
        assert [[np.asarray(e).tolist() for e in x] for x in a[col]] == [[np.asarray(e).tolist() for e in x] for x in b[col]], col
    _assert_same_top20(a, b)
    assert (a[["reply", "n_swaps", "finish_reason", "untouched"]] == b[["reply", "n_swaps", "finish_reason", "untouched"]]).all().all()
    np.testing.assert_allclose(_flat(a, "logprobs"), _flat(b, "logprobs"), atol=LOGPROB_ATOL)
    np.testing.assert_allclose(_flat(a, "top20_logprobs"), _flat(b, "top20_logprobs"), rtol=FLOAT16_STORED_RTOL, atol=LOGPROB_ATOL)
    np.testing.assert_allclose(_flat(a, "entropy_full"), _flat(b, "entropy_full"), atol=ENTROPY_ATOL)
    ca, cb = (load_clean(two_orders[s]).sort_values("question_index").reset_index(drop=True) for s in ("question", "sweep"))
    assert [list(x) for x in ca["token_ids"]] == [list(x) for x in cb["token_ids"]]


def test_sweep_order_is_recorded_and_bounded(two_orders):
    sweep = load_manifest(two_orders["sweep"])["sessions"][-1]["schedule"]
    assert sweep["order"] == "sweep" and sweep["live_rows"] == LIVE
    assert N_SUBS < sweep["peak_rows"] <= LIVE  # requests shared the batch, never past the bound
    # a ragged batch counts what attention read: live columns every step, masked ones only over row tails
    assert sweep["steps"] > 0 and sweep["columns_live"] > sweep["columns_masked"] >= 0
    assert sweep["requests"] == N_Q + sum(1 for _, r in load_clean(two_orders["sweep"]).iterrows() if r["n_triggers"])
    assert sweep["early_forks"] >= 1  # trials forked at a clean run's first trigger while it decoded on
    assert load_manifest(two_orders["question"])["sessions"][-1]["schedule"] == {"order": "question"}


def test_requests_joining_a_running_batch_decode_as_alone(model):
    """Two prompts of different lengths: one joins the other's batch mid-decode (on a ragged batch
    with no padding, each at its own length); each row's tokens are what it decodes alone."""
    short = model.render_chat([{"role": "user", "content": "Name a colour."}]).ids
    long = model.render_chat([{"role": "user", "content": "Explain in two sentences why the sky is blue during the day."}]).ids
    alone = [model.greedy([p], 24, top_k=5)[0] for p in (short, long)]
    stream = model.stream(top_k=5, live_rows=2)
    stream.submit([short], 24)
    stream.submit([long], 24)
    got = dict(stream)
    assert stream.peak_rows == 2
    for gid, want in enumerate(alone):
        g = got[gid][0]
        assert g.token_ids == want.token_ids
        np.testing.assert_allclose(g.logprobs, want.logprobs, atol=LOGPROB_ATOL)
        np.testing.assert_allclose(g.entropy, want.entropy, atol=ENTROPY_ATOL)


def test_slab_cache_pads_stacks_and_trims():
    import torch

    a, b = SlabCache(), SlabCache()
    ka = torch.arange(2 * 1 * 3 * 2, dtype=torch.float32).reshape(2, 1, 3, 2)
    kb = -torch.arange(1 * 1 * 1 * 2, dtype=torch.float32).reshape(1, 1, 1, 2) - 1
    a.update(ka, ka + 100, 0)
    b.update(kb, kb - 100, 0)
    b.pad_left(2)
    a.stack(b)
    keys = a.layers[0].keys
    assert keys.shape == (3, 1, 3, 2)
    assert torch.equal(keys[:2], ka) and torch.equal(keys[2, :, 2:], kb[0]) and not keys[2, :, :2].any()
    a.drop_left(2)
    assert torch.equal(a.layers[0].keys, torch.cat([ka[:, :, 2:], kb], 0)) and a.get_seq_length() == 1
    a.update(torch.ones(3, 1, 1, 2), torch.ones(3, 1, 1, 2), 0)  # written in place after the trim
    assert a.get_seq_length() == 2 and torch.equal(a.layers[0].values[:, :, -1], torch.ones(3, 1, 2))
