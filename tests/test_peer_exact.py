"""The readouts against the peer libraries' own conventions, on the real default model.

lm-evaluation-harness 0.4.13 and lm-polygraph 0.7.0 build their requests as re-stated below (file
and line of each library's wheel); the numbers they would compute are then computed with the
model's raw forward pass or transformers' own ``generate()`` -- never with sleight's readers -- and
the readouts must agree within 1e-4. Where lm-eval is installed, the re-statement itself is checked
against lm-eval's own ``TemplateLM._encode_pair``, ``Message`` and ``multiturn_to_singleturn``.
"""

from __future__ import annotations

import json

import pytest

from sleight.readout.audit.lm_eval import load_lm_eval_task
from sleight.readout.audit.measure import measure
from sleight.readout.ptrue.readouts import ptrue_prompt, score_pairs
from tolerances import LOGPROB_ATOL

DOCS = [
    {"q": "What is the capital of France?", "opts": ["Paris", "London", "Berlin", "Rome"], "label": 0},
    {"q": "How many legs does a spider have?", "opts": ["six", "eight", "ten", "four"], "label": 1},
]
TASK = (
    "task: capitals\ndataset_path: json\ndataset_kwargs:\n  data_files: {test: docs.jsonl}\ntest_split: test\n"
    "output_type: multiple_choice\ndoc_to_text: \"Question: {{q}}\\nAnswer:\"\ndoc_to_choice: opts\ndoc_to_target: label\n"
)
# A context that ends in a space: lm-eval moves it into the continuation in plain mode too.
SPACED = TASK.replace('"Question: {{q}}\\nAnswer:"', '"Q: {{q}} A: "').replace("task: capitals", "task: spaced")


# -- lm-evaluation-harness 0.4.13, re-stated ----------------------------------------------------------
def harness_requests(model, doc: dict, *, chat: bool, text_template: str) -> list[tuple[str, str]]:
    """(context, continuation) per choice, as ``ConfigurableTask`` builds them zero-shot.

    ``fewshot_context`` (api/task.py 1025-1040): one user ``Message`` with an empty delimiter; plain:
    its text; chat: ``multiturn_to_singleturn`` (api/utils.py 65-83) through ``HFLM.apply_chat_template``
    (models/huggingface.py 1718-1729: ``add_generation_prompt=True``, ``continue_final_message=False``).
    ``construct_requests`` (api/task.py 1376-1390): ``target_delimiter + choice``, the delimiter
    dropped under ``--apply_chat_template`` (no gen_prefix).
    """
    text = text_template.format(**doc)
    if chat:
        context = model.tokenizer.apply_chat_template(
            [{"role": "user", "content": text}], tokenize=False, add_generation_prompt=True, continue_final_message=False
        )
    else:
        context = text
    delim = "" if chat else " "
    return [(context, f"{delim}{c}") for c in doc["opts"]]


def harness_encode_pair(tokenizer, context: str, continuation: str) -> tuple[list[int], list[int]]:
    """``TemplateLM._encode_pair`` (api/model.py 413-431) with ``HFLM.tok_encode`` (huggingface.py
    1040-1063: ``add_bos_token`` unset, so the tokenizer's default special tokens)."""
    n = len(context) - len(context.rstrip())
    if n > 0:
        continuation = context[-n:] + continuation
        context = context[:-n]
    whole = tokenizer.encode(context + continuation)
    ctx = tokenizer.encode(context)
    return ctx, whole[len(ctx) :]


def harness_loglikelihood(model, ctx: list[int], cont: list[int]) -> float:
    """``HFLM._loglikelihood_tokens`` for one request (huggingface.py 1435-1436, 1503, 1523, 1552):
    the model over ``(ctx + cont)[:-1]``, log-softmax, the continuation's positions gathered."""
    import torch

    inp = torch.tensor([(ctx + cont)[:-1]])
    with torch.no_grad():
        logits = model.model(inp).logits.float()
    lp = torch.log_softmax(logits, dim=-1)[0, len(ctx) - 1 :]
    return float(lp[torch.arange(len(cont)), torch.tensor(cont)].sum())


def _task(tmp_path, yaml_text: str):
    (tmp_path / "docs.jsonl").write_text("\n".join(json.dumps(d) for d in DOCS), encoding="utf-8")
    path = tmp_path / "task.yaml"
    path.write_text(yaml_text, encoding="utf-8")
    return path


@pytest.mark.parametrize("chat", [pytest.param(False, marks=pytest.mark.slow), True], ids=["plain", "chat"])
@pytest.mark.parametrize(
    "yaml_text, template", [(TASK, "Question: {q}\nAnswer:"), pytest.param(SPACED, "Q: {q} A: ", marks=pytest.mark.slow)], ids=["task", "trailing-space"]
)
def test_option_logprobs_equal_lm_evals_loglikelihoods(model, tmp_path, monkeypatch, chat, yaml_text, template):
    if not hasattr(model, "model"):
        pytest.skip("the reference forward pass needs the hf engine")
    monkeypatch.chdir(tmp_path)  # data_files are read from the working directory, as lm-eval reads them
    items = load_lm_eval_task(_task(tmp_path, yaml_text), chat=chat)
    rows = measure(model, items, ["original"], max_new_tokens=1)
    for doc, row in zip(DOCS, rows):
        want = [harness_loglikelihood(model, *harness_encode_pair(model.tokenizer, c, o)) for c, o in harness_requests(model, doc, chat=chat, text_template=template)]
        assert row["option_logprobs"] == pytest.approx(want, abs=LOGPROB_ATOL)
        assert row["argmax_id"] is not None
    if chat and yaml_text is TASK:
        # The case: "\nParis" after a context ending in "assistant" -- ids [198, 38634].
        _, cont = harness_encode_pair(model.tokenizer, *harness_requests(model, DOCS[0], chat=True, text_template=template)[0])
        assert cont == [198, 38634] and rows[0]["first_token_ids"][0] == 198
        assert rows[0]["context"].endswith("<|im_start|>assistant") and rows[0]["options"][0] == "\nParis"


def test_the_restatement_is_lm_evals_own(model):
    """Our re-statement against lm-eval's own code, where the harness is installed."""
    pytest.importorskip("lm_eval")
    from lm_eval.api.model import TemplateLM
    from lm_eval.api.utils import Message, multiturn_to_singleturn

    class Harness(TemplateLM):  # the tokenizer half of HFLM: enough for _encode_pair
        def __init__(self, tokenizer):
            super().__init__()
            self.tokenizer = tokenizer

        @property
        def eot_token_id(self):
            return self.tokenizer.eos_token_id

        def tok_encode(self, string, add_special_tokens=None, **kwargs):
            return self.tokenizer.encode(string) if add_special_tokens is None else self.tokenizer.encode(string, add_special_tokens=add_special_tokens)

        def _loglikelihood_tokens(self, requests, **kwargs):
            raise NotImplementedError

        def loglikelihood_rolling(self, requests, disable_tqdm=False):
            raise NotImplementedError

        def generate_until(self, requests, disable_tqdm=False):
            raise NotImplementedError

    lm = Harness(model.tokenizer)
    for chat in (False, True):
        for template in ("Question: {q}\nAnswer:", "Q: {q} A: "):
            for doc in DOCS:
                msgs = [Message("user", template.format(**doc), "")]
                if chat:
                    context = model.tokenizer.apply_chat_template(multiturn_to_singleturn(msgs), tokenize=False, add_generation_prompt=True)
                else:
                    context = "".join(m.to_text() for m in msgs)
                for (c, o) in harness_requests(model, doc, chat=chat, text_template=template):
                    assert c == context
                    assert harness_encode_pair(model.tokenizer, c, o) == lm._encode_pair(c, o)


def test_data_files_resolve_from_the_working_directory(tmp_path, monkeypatch, capsys):
    path = _task(tmp_path, TASK)
    other = tmp_path / "elsewhere"
    other.mkdir()
    (other / "docs.jsonl").write_text(json.dumps({**DOCS[0], "q": "From the working directory?"}), encoding="utf-8")
    monkeypatch.chdir(other)
    items = load_lm_eval_task(path)
    assert items[0].messages[0]["content"] == "Question: From the working directory?\nAnswer:"  # the cwd wins
    assert capsys.readouterr().err == ""
    (other / "docs.jsonl").unlink()
    items = load_lm_eval_task(path)  # only next to the YAML: used, with a note
    assert len(items) == 2 and "not in the working directory" in capsys.readouterr().err


# -- lm-polygraph 0.7.0, re-stated --------------------------------------------------------------------
class _Sanitise:
    """``WhiteboxModel._SanitizeLogitsProcessor`` (utils/model.py 458-487)."""

    def __call__(self, input_ids=None, scores=None):
        import torch

        finite = torch.isfinite(scores)
        if finite.all():
            return scores
        row_max = torch.where(finite, scores, torch.tensor(float("-inf"))).max(-1, keepdim=True).values
        row_min = torch.where(finite, scores, torch.tensor(float("inf"))).min(-1, keepdim=True).values
        row_max = torch.where(torch.isfinite(row_max), row_max, torch.zeros_like(row_max))
        row_min = torch.where(torch.isfinite(row_min), row_min, torch.zeros_like(row_min))
        scores = torch.where(torch.isposinf(scores), row_max, scores)
        scores = torch.where(torch.isneginf(scores), row_min, scores)
        return torch.nan_to_num(scores, nan=0.0)


class _Scores:
    """``WhiteboxModel._ScoresProcessor`` (utils/model.py 449-456)."""

    def __init__(self):
        self.scores = []

    def __call__(self, input_ids=None, scores=None):
        self.scores.append(scores.log_softmax(-1))
        return scores


def polygraph_p_true(model, question: str, answer: str, *, instruct: bool) -> float:
    """``PromptCalculator`` (stat_calculators/prompt.py 68-107) on ``WhiteboxModel``: the prompt
    through ``tokenize`` (utils/model.py 668-697), ``generate`` with the library's processors
    (489-537) and its default generation parameters (utils/generation_parameters.py 28-37)."""
    from transformers import LogitsProcessorList

    tok = model.tokenizer
    text = ptrue_prompt(question, answer)
    if instruct:
        text = tok.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True, tokenize=False)
    batch = tok([text], padding=True, return_tensors="pt", add_special_tokens=not instruct)
    expected = [t for t in tok(["True"])["input_ids"][0] if t not in (tok.eos_token_id, tok.bos_token_id)]
    assert len(expected) == 1
    keep = _Scores()
    model.model.generate(
        **batch, output_scores=True, return_dict_in_generate=True, min_new_tokens=1, max_new_tokens=1, num_beams=1,
        do_sample=False, temperature=1.0, top_k=50, top_p=1.0, repetition_penalty=1.0,
        logits_processor=LogitsProcessorList([_Sanitise(), keep]),
    )
    return float(keep.scores[-1][0, expected[0]])


QS = ["What is the capital of Germany?", "How many legs does a dog have?"]
AS = ["Berlin", "\n\nsix"]  # an answer as a raw-prompt model writes it: not stripped


@pytest.mark.parametrize("instruct", [pytest.param(True, marks=pytest.mark.slow), False], ids=["instruct", "raw"])
def test_library_equals_lm_polygraphs_p_true(model, instruct):
    if not hasattr(model, "model"):
        pytest.skip("the reference path needs the hf engine")
    rows = [r for r in score_pairs(model, QS, AS, instruct=instruct, continuation_tokens=0) if r["readout"] == "library"]
    for (q, a), row in zip(zip(QS, AS), rows):
        assert row["score"] == pytest.approx(polygraph_p_true(model, q, a, instruct=instruct), abs=LOGPROB_ATOL)
        assert ("<|im_start|>" in row["context"]) is instruct
        assert ("Possible answer:" + a + "\n") in row["context"]  # inserted verbatim


def test_raw_prompt_has_no_special_tokens_added(model):
    """Non-instruct lm-polygraph encodes with the tokenizer's default special tokens; for the default
    model those are none, so the raw context ids are sleight's plain encoding."""
    text = ptrue_prompt(QS[0], AS[0])
    assert model.tokenizer(text)["input_ids"] == model.encode(text)
