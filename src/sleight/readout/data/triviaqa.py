"""TriviaQA as lm-polygraph 0.7.0 builds and loads it (its ``LM-Polygraph/triviaqa`` dataset).

As for MMLU (:mod:`sleight.readout.data.mmlu`), ``scripts/polygraph_eval`` (109-125, 136-137) loads the
prebuilt ``LM-Polygraph/triviaqa`` (config ``simple_instruct`` in
``examples/configs/polygraph_eval_triviaqa_simple_instruct.yaml``, ``continuation`` in
``polygraph_eval_triviaqa.yaml``; split ``test``; ``subsample_eval_dataset: -1``, ``seed: [1]``). Its rows
were built by ``dataset_builders/builders/trivia_qa.py`` from ``trivia_qa`` config ``rc.nocontext``
(now ``mandarjoshi/trivia_qa``): split ``validation`` for the items, ``train`` for the few-shot
examples. The rule (tag ``v0.7.0``):

* ``np.random.seed(SEED)``, ``SEED = 1`` (``builders/constants.py``; ``trivia_qa.py`` 21); 5 few-shot rows
  ``np.random.choice(len(train), 5, replace=False)`` (27-29), one draw shared by every item;
* ``simple_instruct`` (177-183, instruct mode 30-46, 60-64): ``"Answer the following question as briefly
  as possible."`` + ``"\\n\\nHere are a few examples of questions and answers:\\n\\n"``, each example
  ``"Question: {question}\\nAnswer: {normalized_value}"`` + ``"\\n\\n"`` (question stripped), then ``"Now
  answer the following question:\\n\\n"``; the item ``"Question: {question}\\nAnswer: "`` with the question
  *not* stripped;
* ``continuation`` (113-141, 47-56, 65-69): each example ``"Question: {question}\\nAnswer:{normalized_value}"``
  + ``"\\n"``, the item ``"Question: {question}\\nAnswer:"``;
* ``output`` = ``answer["aliases"]`` (70), the references the library scores against.

``subsample=N`` and ``seed`` as :func:`sleight.readout.data.mmlu.polygraph_subsample`.

Records: ``question`` is lm-polygraph's ``input`` (what the model answers and the P(True) prompt quotes),
``answers`` the answer's ``value`` then its aliases (sleight's correctness rule matches any of them),
``wrong`` the next record's ``value`` (a constructed wrong answer, as ``hf:triviaqa`` did), and
``instruction`` the "answer briefly" line that the paper's Deleted readout removes.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

import numpy as np

from sleight.errors import UserError
from sleight.readout.data.common import (
    DataSet,
    HubSplit,
    Provenance,
    Spec,
    fewshot_where,
    load_split,
    struct,
    text,
    texts,
)
from sleight.readout.data.mmlu import polygraph_params, polygraph_subsample
from sleight.readout.data.records import PtruePair, TriviaQARecord

HUB = HubSplit("mandarjoshi/trivia_qa", "rc.nocontext", "validation", None)
FEWSHOT_SPLIT = "train"
TQA_FEWSHOT_HINT = "lm-polygraph's few-shot examples come from trivia_qa rc.nocontext's train split; add :fewshot=PATH/rc.nocontext/train-00000-of-00001.parquet"
PREBUILT = {v: HubSplit("LM-Polygraph/triviaqa", v, "test", None) for v in ("simple_instruct", "continuation")}
SEED = 1
N_SHOT = 5
INSTRUCTION = "Answer the following question as briefly as possible."
INSTRUCT_EXAMPLE = "Question: {question}\nAnswer: {answer}"
INSTRUCT_ITEM = "Question: {question}\nAnswer: "
CONTINUATION_ITEM = "Question: {question}\nAnswer:{answer}"
FEWSHOT_LEAD = "\n\nHere are a few examples of questions and answers:\n\n"
FEWSHOT_END = "Now answer the following question:\n\n"
VARIANTS = ("simple_instruct", "continuation")


def _shot(row: Mapping[str, object], template: str) -> str:
    """One few-shot example: the train row's question (stripped) and its answer's ``normalized_value``."""
    where = "triviaqa few-shot row"
    return template.format(question=text(row, "question", where).strip(), answer=text(struct(row, "answer", where), "normalized_value", where))


def polygraph_inputs(rows: Sequence[Mapping[str, object]], train_rows: Sequence[Mapping[str, object]], variant: str = "simple_instruct") -> list[TriviaQARecord]:
    """lm-polygraph's TriviaQA rows rebuilt from ``rc.nocontext`` rows (see the module docstring)."""
    rng = np.random.RandomState(SEED)
    if len(train_rows) < N_SHOT:
        raise UserError(f"triviaqa: the few-shot split has {len(train_rows)} rows; lm-polygraph draws {N_SHOT}")
    shots = [train_rows[int(i)] for i in rng.choice(len(train_rows), N_SHOT, replace=False)]
    if variant == "simple_instruct":
        lead = INSTRUCTION + FEWSHOT_LEAD + "".join(_shot(s, INSTRUCT_EXAMPLE) + "\n\n" for s in shots) + FEWSHOT_END
    else:
        lead = "".join(_shot(s, CONTINUATION_ITEM) + "\n" for s in shots)
    out = []
    for k, r in enumerate(rows):
        where = f"triviaqa row {k + 1}"
        question = text(r, "question", where)
        item = INSTRUCT_ITEM.format(question=question) if variant == "simple_instruct" else CONTINUATION_ITEM.format(question=question, answer="")
        ans = struct(r, "answer", where)
        aliases = texts(ans, "aliases", where)
        out.append(_record(str(r.get("question_id") or f"tqa-{k}"), lead + item, question.strip(), [text(ans, "value", where), *aliases], aliases, k, variant))
    return _with_wrong(out)


def _record(rid: str, prompt: str, raw: str, answers: list[str], aliases: list[str], k: int, variant: str) -> TriviaQARecord:
    return {
        "id": str(rid), "question": prompt, "raw_question": raw, "answers": list(dict.fromkeys(a for a in answers if a and a.strip())),
        "aliases": aliases, "instruction": INSTRUCTION if variant == "simple_instruct" else None, "source_index": k,
        "wrong": None,  # set by _with_wrong, once every record is built
    }


def _with_wrong(records: list[TriviaQARecord]) -> list[TriviaQARecord]:
    for k, r in enumerate(records):
        nxt = records[(k + 1) % len(records)]["answers"][0] if len(records) > 1 else None
        r["wrong"] = nxt if nxt not in r["answers"] else None
    return records


_STRIPPED = re.compile(r"\AQ: (?P<q>.*)\n\nA:\Z", re.DOTALL)


def prebuilt_records(rows: Sequence[Mapping[str, object]], variant: str) -> list[TriviaQARecord]:
    """Rows of ``LM-Polygraph/triviaqa`` (``input, output`` aliases, ``stripped_input``) as records."""
    out = []
    for k, r in enumerate(rows):
        stripped, given, aliases = r.get("stripped_input"), r.get("input"), r.get("output")
        m = _STRIPPED.match(stripped) if isinstance(stripped, str) else None
        if not isinstance(given, str) or not isinstance(aliases, list) or not aliases or not all(isinstance(a, str) for a in aliases):
            raise UserError(f"triviaqa row {k + 1}: expected LM-Polygraph/triviaqa's input, output (a list of aliases) and stripped_input columns")
        out.append(_record(f"tqa-{k}", given, m["q"] if m else "", list(aliases), list(aliases), k, variant))
    return _with_wrong(out)


def load(spec: Spec) -> DataSet:
    """``triviaqa:WHERE[:variant=simple_instruct|continuation][:subsample=N][:seed=S][:fewshot=FILE]``."""
    variant, size, seed = polygraph_params(spec, VARIANTS)
    loaded = load_split(spec, HUB if not spec.is_hub else PREBUILT[variant])
    rule: dict[str, object] = {"library": "lm-polygraph 0.7.0", "variant": variant, "n_shot": N_SHOT, "fewshot_seed": SEED, "subsample": size if size is not None else -1, "seed": seed}
    prov: Provenance
    if loaded.rows and "input" in loaded.rows[0]:
        records = prebuilt_records(loaded.rows, variant)
        prov = {"spec": spec.text, "family": "triviaqa", **loaded.record(PREBUILT[variant]), "layout": "LM-Polygraph/triviaqa", "rule": rule}
    else:
        train = load_split(spec, HUB, split=FEWSHOT_SPLIT, where=fewshot_where(spec, "validation", FEWSHOT_SPLIT, TQA_FEWSHOT_HINT))
        records = polygraph_inputs(loaded.rows, train.rows, variant)
        fewshot = train.record(HubSplit(HUB.dataset, HUB.config, FEWSHOT_SPLIT, None))
        prov = {"spec": spec.text, "family": "triviaqa", **loaded.record(HUB), "layout": "trivia_qa rc.nocontext", "fewshot": fewshot, "rule": rule}
    records = polygraph_subsample(records, size, seed)
    return DataSet("triviaqa", records, prov, {"qa": _qa, "ptrue": _qa})


def _qa(records: Sequence[TriviaQARecord]) -> list[PtruePair]:
    out = []
    for r in records:
        pair: PtruePair = {"id": r["id"], "question": r["question"], "answers": r["answers"]}
        if r["wrong"]:
            pair["wrong"] = r["wrong"]
        if r["instruction"]:
            pair["instruction"] = r["instruction"]
        out.append(pair)
    return out
