"""Prefixes read as a tree (``HFModel.read_forks``: what all of them share once, each alone from that
cache, its tails forked from its own) read what the whole sequences read: the same asked log-probs, top tokens and entropy within the forked-cache noise the
suite derives (``tests/tolerances.py``), on the real bundled model; and the grouping that feeds it
(``position.fork_groups``) leaves every tail non-empty."""

from __future__ import annotations

import numpy as np
import pytest

from sleight.backends.base import ForkedReads
from sleight.position import fork_groups, read_positions
from tolerances import ENTROPY_ATOL, LOGPROB_ATOL


def test_fork_groups_split_each_run_at_its_common_prefix() -> None:
    seqs = [[1, 2, 3, 4], [1, 2, 3, 5, 6], [7, 8], [7, 8]]
    prefixes, tails = fork_groups(seqs, 2)
    assert prefixes == [[1, 2, 3], [7]]
    assert tails == [[[4], [5, 6]], [[8], [8]]]  # identical sequences keep one token each to read at
    assert fork_groups(seqs, 4)[0] == [[]]  # nothing shared: no prefix to fork


def _contexts(model) -> tuple[list[list[int]], list[list[list[int]]]]:
    """Two chats of different lengths, four slot prefixes each (a vote's label slots), and one with two."""
    prefixes, tails = [], []
    for question, slots in (
        ("What is the capital of France? Answer in one short sentence, please.", ('{"flagged":', '{"corrected":', '{"derailed":', '{"switch_aware":')),
        ("Why is the sky blue?", ('{"flagged":', '{"corrected":', '{"derailed":', '{"switch_aware":')),
        ("Name three primary colors.", ("Yes", "No")),
    ):
        chat = model.render_chat([{"role": "user", "content": question}]).ids
        prefixes.append(list(chat))
        tails.append([list(model.encode(s)) for s in slots])
    return prefixes, tails


def test_forked_reads_equal_whole_reads(model) -> None:
    assert isinstance(model, ForkedReads)
    prefixes, tails = _contexts(model)
    whole = [p + t for p, ts in zip(prefixes, tails) for t in ts]
    asked = [[int(model.encode(" true")[0]), int(model.encode(" false")[0]), 42] for _ in whole]
    forked = model.read_forks(prefixes, tails, asked, top_k=20)
    alone = model.read_next(whole, asked, top_k=20)
    assert len(forked) == len(alone) == len(whole)
    for f, a in zip(forked, alone):
        np.testing.assert_allclose(f.logprobs, a.logprobs, atol=LOGPROB_ATOL)
        np.testing.assert_allclose(f.top_logprobs, a.top_logprobs, atol=LOGPROB_ATOL)
        assert f.entropy == pytest.approx(a.entropy, abs=ENTROPY_ATOL)
        # the argmax is the same token unless the two best are within the noise of each other
        assert f.top_ids[0] == a.top_ids[0] or abs(a.top_logprobs[0] - a.top_logprobs[1]) < LOGPROB_ATOL


def test_read_positions_forks_a_votes_slots(model) -> None:
    """The reading a juror's slots get is the same whether its contexts are forked or read whole."""
    chat = model.render_chat([{"role": "user", "content": "Is Paris in France?"}]).text
    contexts = [chat + '{"' + f + '":' for f in ("flagged", "corrected", "derailed", "switch_aware")]
    sets = [[[" true", " false"]] for _ in contexts]
    forked = read_positions(model, contexts, sets, forks=4)
    whole = read_positions(model, contexts, sets)
    for f, w in zip(forked, whole):
        assert f.context_ids == w.context_ids and f.asked_ids == w.asked_ids
        np.testing.assert_allclose(f.asked_logprobs, w.asked_logprobs, atol=LOGPROB_ATOL)
        assert f.option_sets[0].mass == pytest.approx(w.option_sets[0].mass, abs=LOGPROB_ATOL)


def test_read_forks_refuses_empty_tails(model) -> None:
    with pytest.raises(ValueError, match="non-empty prefixes and tails"):
        model.read_forks([[1, 2]], [[[]]], [[]])
    with pytest.raises(ValueError, match="one list of asked ids per tail"):
        model.read_forks([[1, 2]], [[[3], [4]]], [[]])


def test_text_votes_read_each_prompt_alone_and_decode_them_together(model) -> None:
    """A local juror's free-text replies (``LocalChat.chat_many``): prompts of unequal lengths, each
    its own request on one ragged stream, give every row the tokens that prompt gets decoded alone."""
    from sleight.backends.chat import greedy_rows_alone

    prompts = [
        list(model.render_chat([{"role": "user", "content": q}]).ids)
        for q in ("What is the capital of France?", "Why is the sky blue? Answer briefly.", "Name three primary colors, then stop.")
    ]
    together = greedy_rows_alone(model, prompts, 24)
    for p, g in zip(prompts, together):
        alone = model.greedy([p], 24, top_k=1)[0]
        assert list(g.token_ids) == list(alone.token_ids) and g.finish_reason == alone.finish_reason
