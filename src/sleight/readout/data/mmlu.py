"""MMLU as lm-polygraph 0.7.0 builds and loads it (its ``LM-Polygraph/mmlu`` dataset).

lm-polygraph does not format MMLU at evaluation time: ``scripts/polygraph_eval`` (109-125) loads the
prebuilt hub dataset ``LM-Polygraph/mmlu`` (config ``simple_instruct`` in
``examples/configs/polygraph_eval_mmlu_simple_instruct.yaml``, ``continuation`` in
``polygraph_eval_mmlu.yaml``; split ``test``, columns ``input``/``output``), and subsamples it only when
``subsample_eval_dataset`` is not -1 (136-137; -1 in both configs). The ``size: 10000`` key of those
configs is not passed to ``Dataset.load`` by that script, so the whole split is used. The rows were
built by ``dataset_builders/builders/mmlu.py``; this module rebuilds them from ``cais/mmlu`` (config
``all``: split ``test`` for the items, ``dev`` for the few-shot examples), or reads the prebuilt
rows as they are. The rule, with the 0.7.0 source lines (tag ``v0.7.0``):

* ``np.random.seed(SEED)`` once, ``SEED = 1`` (``builders/constants.py``; ``mmlu.py`` 22), then per
  subject in ``np.unique`` (sorted) order (30): 5 few-shot rows drawn from that subject's ``dev`` rows
  with ``np.random.choice(len, 5, replace=False)`` (38-41), and the subject's first
  ``mmlu_max_subject_size = 100`` test rows in file order (74-77);
* ``input`` = description + ``"\\n\\n"`` + few-shot block + the item's prompt with an empty answer
  (80-90); ``output`` = the gold letter (91); the question is ``.strip()``-ed everywhere;
* ``simple_instruct`` (190-195, instruct mode 42-61): description ``"Given the following question about
  {subject} and four candidate answers (A, B, C, and D), choose the best answer. Your response should
  contain only the selected option's letter (A, B, C, or D), not a complete sentence."`` (subject with
  ``_`` as spaces), the few-shot block ``"Here are a few examples of questions and answers:\\n\\n"``, each
  example ``"Q:{question}\\nA. ...\\nD. {choices[3]}\\nAnswer:{letter}"`` + ``"\\n\\n"``, then ``"Now answer
  the following question in the same format:\\n\\n"``; the item ``"Q:{question}\\nA. ...\\nD. ...\\nAnswer:"``;
* ``continuation`` (127-154, 62-72): description ``"The following are multiple choice questions (with
  answers) about {subject}."``, each example the item prompt with its letter + ``"\\n"``.

``subsample=N`` applies ``Dataset.subsample(N, seed)`` (``src/lm_polygraph/utils/dataset.py``
119-134): ``np.random.seed(seed)``, all rows in order when fewer than N, else
``np.random.choice(len, N, replace=False)`` in the drawn order; ``seed`` defaults to the configs'
``seed: [1]``.

Records keep the question, the four choices and the gold letter, and carry lm-polygraph's ``input``
as the text the model answers (:attr:`sleight.readout.ptrue.answers.QAItem.input_text`) and its
description line as ``instruction`` (the letter instruction the paper's Deleted readout removes).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import TypeVar

import numpy as np

from sleight.errors import UserError
from sleight.readout.data.common import (
    DataSet,
    HubSplit,
    Provenance,
    Spec,
    cells,
    check_params,
    choice_param,
    fewshot_where,
    int_param,
    lettered_ptrue_records,
    load_split,
    text,
)
from sleight.readout.data.records import LetteredQuestion, McqRecord, MmluProRecord, MmluRecord

HUB = HubSplit("cais/mmlu", "all", "test", "c30699e8356da336a370243923dbaf21066bb9fe")
FEWSHOT_SPLIT = "dev"
MMLU_FEWSHOT_HINT = "lm-polygraph's few-shot examples come from cais/mmlu's dev split; add :fewshot=PATH/all/dev-00000-of-00001.parquet"
PREBUILT = {v: HubSplit("LM-Polygraph/mmlu", v, "test", None) for v in ("simple_instruct", "continuation")}
SEED = 1  # dataset_builders/builders/constants.py
N_SHOT = 5
MAX_SUBJECT_SIZE = 100
DEFAULT_EVAL_SEED = 1  # seed: [1] in the eval configs
LETTERS = ("A", "B", "C", "D")
ITEM_PROMPT = "Q:{question}\nA. {choices[0]}\nB. {choices[1]}\nC. {choices[2]}\nD. {choices[3]}\nAnswer:{answer}"
DESCRIPTIONS = {
    "simple_instruct": (
        "Given the following question about {subject} and four candidate answers (A, B, C, and D), choose the best answer. "
        "Your response should contain only the selected option's letter (A, B, C, or D), not a complete sentence."
    ),
    "continuation": "The following are multiple choice questions (with answers) about {subject}.",
}
FEWSHOT_LEAD = "Here are a few examples of questions and answers:\n\n"
FEWSHOT_END = "Now answer the following question in the same format:\n\n"
VARIANTS = tuple(DESCRIPTIONS)


def polygraph_inputs(test_rows: Sequence[Mapping[str, object]], dev_rows: Sequence[Mapping[str, object]], variant: str = "simple_instruct") -> list[MmluRecord]:
    """lm-polygraph's MMLU rows rebuilt from ``cais/mmlu`` rows (see the module docstring), in its order."""
    rng = np.random.RandomState(SEED)  # the global state np.random.seed(SEED) sets
    subjects = np.array([r["subject"] for r in test_rows])
    dev_subjects = np.array([r["subject"] for r in dev_rows])
    out: list[MmluRecord] = []
    for subject in np.unique(subjects):
        description = DESCRIPTIONS[variant].format(subject=str(subject).replace("_", " "))
        shots = [dev_rows[int(i)] for i in np.argwhere(dev_subjects == subject).flatten()]
        if len(shots) < N_SHOT:
            raise UserError(f"mmlu: subject '{subject}' has {len(shots)} dev rows; lm-polygraph draws {N_SHOT} few-shot examples per subject")
        picked = [shots[int(i)] for i in rng.choice(len(shots), N_SHOT, replace=False)]
        if variant == "simple_instruct":
            block = FEWSHOT_LEAD + "".join(_prompt(s, _gold(s)) + "\n\n" for s in picked) + FEWSHOT_END
        else:
            block = "".join(_prompt(s, _gold(s)) + "\n" for s in picked)
        rows = [(int(i), test_rows[int(i)]) for i in np.argwhere(subjects == subject).flatten()][:MAX_SUBJECT_SIZE]
        for index, r in rows:
            out.append({
                "id": f"mmlu-{subject}-{index}", "input": description + "\n\n" + block + _prompt(r, ""),
                "question": text(r, "question", _where(r)).strip(), "choices": [str(c) for c in cells(r, "choices", _where(r))], "answer": _gold(r),
                "subject": str(subject), "instruction": description, "source_index": index,
            })
    return out


def _where(row: Mapping[str, object]) -> str:
    return f"mmlu: a row of subject '{row.get('subject')}'"


def _gold(row: Mapping[str, object]) -> str:
    """cais/mmlu's ``answer`` (the gold choice's index) as its letter."""
    answer = row.get("answer")
    if not isinstance(answer, (int, float, str)):
        raise UserError(f"{_where(row)}: column 'answer' must be the gold choice's index, got {type(answer).__name__}")
    return LETTERS[int(answer)]


def _prompt(row: Mapping[str, object], answer: str) -> str:
    choices = cells(row, "choices", _where(row))
    if len(choices) != 4:
        raise UserError(f"{_where(row)} has {len(choices)} choices (cais/mmlu has 4)")
    return ITEM_PROMPT.format(question=text(row, "question", _where(row)).strip(), choices=choices, answer=answer)


_STRIPPED = re.compile(r"\AQ: (?P<q>.*?)\n\n(?P<block>A\. .*)\n\nA:\Z", re.DOTALL)


def prebuilt_records(rows: Sequence[Mapping[str, object]]) -> list[MmluRecord]:
    """Rows of ``LM-Polygraph/mmlu`` (``input, output, stripped_input``) as records: the question and
    choices read back from ``stripped_input`` (``builders/stripped_formatters.py`` ``mcqa_stripped``)."""
    out: list[MmluRecord] = []
    for k, r in enumerate(rows):
        stripped, output = r.get("stripped_input"), r.get("output")
        m = _STRIPPED.match(stripped) if isinstance(stripped, str) else None
        if not m or not isinstance(output, str) or output not in LETTERS:
            raise UserError(f"mmlu row {k + 1}: expected LM-Polygraph/mmlu's input, output (a letter) and stripped_input columns")
        choices = re.split(r"\n(?=[B-D]\. )", m["block"])
        if len(choices) != 4:
            raise UserError(f"mmlu row {k + 1}: stripped_input does not hold four lettered choices")
        given = text(r, "input", f"mmlu row {k + 1}")
        first = given.split("\n\n", 1)[0]
        out.append({
            "id": f"mmlu-{k}", "input": given, "question": m["q"], "choices": [c[3:] for c in choices], "answer": output,
            "instruction": first, "source_index": k,
        })
    return out


T = TypeVar("T")


def polygraph_subsample(records: list[T], size: int | None, seed: int) -> list[T]:
    """``Dataset.subsample(size, seed)`` (``utils/dataset.py`` 119-134); ``None`` keeps every row (-1)."""
    if size is None:
        return records
    rng = np.random.RandomState(seed)
    if len(records) < size:
        return records
    return [records[int(i)] for i in rng.choice(len(records), size, replace=False)]


def polygraph_params(spec: Spec, variants: Sequence[str]) -> tuple[str, int | None, int]:
    """``variant``, ``subsample`` and ``seed`` of an lm-polygraph-built spec (MMLU, TriviaQA)."""
    check_params(spec, ("variant", "subsample", "seed", "fewshot"))
    variant = choice_param(spec, "variant", "simple_instruct", tuple(variants))
    seed = int_param(spec, "seed", DEFAULT_EVAL_SEED)
    assert seed is not None
    return variant, int_param(spec, "subsample", None, minimum=1), seed


def load(spec: Spec) -> DataSet:
    """``mmlu:WHERE[:variant=simple_instruct|continuation][:subsample=N][:seed=S][:fewshot=FILE]``."""
    variant, size, seed = polygraph_params(spec, VARIANTS)
    loaded = load_split(spec, HUB if not spec.is_hub else PREBUILT[variant])
    rule: dict[str, object] = {
        "library": "lm-polygraph 0.7.0", "variant": variant, "n_shot": N_SHOT, "fewshot_seed": SEED, "max_subject_size": MAX_SUBJECT_SIZE,
        "subsample": size if size is not None else -1, "seed": seed,
    }
    prov: Provenance
    if loaded.rows and "input" in loaded.rows[0]:  # LM-Polygraph/mmlu as published: taken as it is
        records = prebuilt_records(loaded.rows)
        prov = {"spec": spec.text, "family": "mmlu", **loaded.record(PREBUILT[variant]), "layout": "LM-Polygraph/mmlu", "rule": rule}
    else:
        dev = load_split(spec, HUB, split=FEWSHOT_SPLIT, where=fewshot_where(spec, "test", FEWSHOT_SPLIT, MMLU_FEWSHOT_HINT))
        records = polygraph_inputs(loaded.rows, dev.rows, variant)
        fewshot = dev.record(HubSplit(HUB.dataset, HUB.config, FEWSHOT_SPLIT, HUB.revision))
        prov = {"spec": spec.text, "family": "mmlu", **loaded.record(HUB), "layout": "cais/mmlu", "fewshot": fewshot, "rule": rule}
    records = polygraph_subsample(records, size, seed)
    return DataSet("mmlu", records, prov, {"qa": _qa, "ptrue": lettered_ptrue_records, "mcq": mcq_records})


def _qa(records: Sequence[MmluRecord]) -> list[LetteredQuestion]:
    return [{"id": r["id"], "question": r["question"], "choices": r["choices"], "answer": r["answer"], "input": r["input"], "instruction": r["instruction"]} for r in records]


def mcq_records(records: Sequence[MmluRecord | MmluProRecord]) -> list[McqRecord]:
    """Audit items (the ``--items`` record format): the record's ``input`` as the prompt, options the
    letters, its description line as the quoted instruction and its lettered choices as the block."""
    out: list[McqRecord] = []
    for r in records:
        letters = [chr(ord("A") + k) for k in range(len(r["choices"]))]
        block = "\n".join(f"{x}. {c}" for x, c in zip(letters, r["choices"]))
        out.append({
            "id": r["id"], "prompt": r["input"], "options": letters, "letters": letters, "choices": list(r["choices"]),
            "question": r["question"], "quoted_instruction": r["instruction"], "choices_block": block, "gold": r["answer"],
        })
    return out
