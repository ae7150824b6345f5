"""MMLU-Pro (the paper's Appendix I): ``TIGER-Lab/MMLU-Pro``, split ``test``, columns
``question_id, question, options`` (up to 10), ``answer`` (the gold letter), ``answer_index``,
``category``, ``src``.

Every row is kept, in the file's order (``n=N`` keeps the first N, ``category=NAME`` one category).
The audit items (``readout audit --data mmlu-pro:FILE``, the ``mcq`` use) quote the item in
lm-polygraph's MMLU ``simple_instruct`` wording (:data:`sleight.readout.data.mmlu.DESCRIPTIONS`),
zero-shot, with the count and the letters of this item's options in place of "four" and "A, B, C,
and D"; MMLU-Pro's own evaluation prompt asks for a chain of thought and a final ``the answer is
(X)``, which a next-token letter readout cannot read, so it is not used.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from sleight.errors import UserError
from sleight.readout.data.common import DataSet, HubSplit, Provenance, Spec, cells, check_params, int_param, load_split
from sleight.readout.data.mmlu import mcq_records
from sleight.readout.data.records import MmluProRecord

HUB = HubSplit("TIGER-Lab/MMLU-Pro", None, "test", "b189ec765aa7ed75c8acfea42df31fdae71f97be")
LETTERS = tuple("ABCDEFGHIJ")
DESCRIPTION = (
    "Given the following question about {subject} and {count} candidate answers ({listed}), choose the best answer. "
    "Your response should contain only the selected option's letter ({either}), not a complete sentence."
)


def _words(letters: Sequence[str], last: str) -> str:
    return ", ".join(letters[:-1]) + f"{',' if len(letters) > 2 else ''} {last} {letters[-1]}"


_COUNTS = {2: "two", 3: "three", 4: "four", 5: "five", 6: "six", 7: "seven", 8: "eight", 9: "nine", 10: "ten"}


def mmlu_pro_records(rows: Sequence[Mapping[str, object]]) -> list[MmluProRecord]:
    """Hub rows -> records with the quoted prompt (``input``) and its instruction line."""
    out: list[MmluProRecord] = []
    for k, r in enumerate(rows):
        options = [str(o) for o in (cells(r, "options", f"mmlu-pro row {k + 1}") if r.get("options") else [])]
        answer = r.get("answer")
        if not 2 <= len(options) <= len(LETTERS) or not isinstance(answer, str) or answer not in LETTERS[: len(options)]:
            raise UserError(f"mmlu-pro row {k + 1}: needs 2-10 options and an answer letter among them (TIGER-Lab/MMLU-Pro's columns)")
        letters = LETTERS[: len(options)]
        category = str(r.get("category") or "general knowledge")
        instruction = DESCRIPTION.format(subject=category, count=_COUNTS[len(options)], listed=_words(letters, "and"), either=_words(letters, "or"))
        block = "\n".join(f"{x}. {o}" for x, o in zip(letters, options))
        out.append({
            "id": f"mmlu-pro-{r.get('question_id', k)}", "question": str(r["question"]).strip(), "choices": options, "answer": answer,
            "category": category, "input": f"{instruction}\n\nQ:{str(r['question']).strip()}\n{block}\nAnswer:", "instruction": instruction, "source_index": k,
        })
    return out


def load(spec: Spec) -> DataSet:
    """``mmlu-pro:WHERE[:n=N][:category=NAME]``."""
    check_params(spec, ("n", "category"))
    n = int_param(spec, "n", None, minimum=1)
    loaded = load_split(spec, HUB)
    records = mmlu_pro_records(loaded.rows)
    if "category" in spec.params:
        records = [r for r in records if r["category"] == spec.params["category"]]
        if not records:
            raise UserError(f"--data '{spec.text}': no item of category '{spec.params['category']}'")
    records = records[:n] if n is not None else records
    prov: Provenance = {"spec": spec.text, "family": "mmlu-pro", **loaded.record(HUB), "rule": {"order": "file", "n": n, "category": spec.params.get("category")}}
    return DataSet("mmlu-pro", records, prov, {"mcq": mcq_records})
