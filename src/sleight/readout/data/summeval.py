"""SummEval with its expert grades (the paper's Appendix G): ``mteb/summeval``, split ``test``.

The hub form has one row per source article (100): ``id``, ``text`` (the article),
``machine_summaries`` (16 system summaries), ``human_summaries`` (references), and per summary the
mean of the three expert annotations on each of ``coherence``, ``consistency``, ``fluency`` and
``relevance`` (lists parallel to ``machine_summaries``; the dataset card: "we averaged the 3 expert
annotations").

Each (article, machine summary) becomes one record, ``<id>:<k>`` with ``k`` the summary's position:
``source``, ``summary``, the four expert grades, and ``human_score`` = the grade of ``dim`` (default
``consistency``, the dimension the ``grade`` preset asks about). ``n=N`` keeps the first N records.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from sleight.errors import UserError
from sleight.readout.data.common import DataSet, HubSplit, Provenance, Spec, check_params, choice_param, int_param, load_split
from sleight.readout.data.records import SummEvalRecord

HUB = HubSplit("mteb/summeval", None, "test", "2cdabb83bf207713f8871b57de188e17773b2bd3")
DIMENSIONS = ("coherence", "consistency", "fluency", "relevance")


def summeval_records(rows: Sequence[Mapping[str, object]], dim: str = "consistency") -> list[SummEvalRecord]:
    out: list[SummEvalRecord] = []
    for k, r in enumerate(rows):
        source, summaries = r.get("text"), r.get("machine_summaries")
        if not isinstance(source, str) or not isinstance(summaries, list) or not all(isinstance(s, str) for s in summaries):
            raise UserError(f"summeval row {k + 1}: expected mteb/summeval's id, text, machine_summaries and the four grade columns")
        columns: dict[str, list[float]] = {}
        for d in DIMENSIONS:
            grades = r.get(d)
            if not isinstance(grades, list) or len(grades) != len(summaries):
                raise UserError(f"summeval row {k + 1}: '{d}' must list one grade per machine summary")
            if not all(isinstance(g, (int, float, str)) for g in grades):
                raise UserError(f"summeval row {k + 1}: '{d}' must list numbers")
            columns[d] = [float(g) for g in grades]
        for j, summary in enumerate(summaries):
            mean = {d: columns[d][j] for d in DIMENSIONS}
            out.append({
                "id": f"{r.get('id', k)}:{j}", "source": source, "summary": summary, "coherence": mean["coherence"], "consistency": mean["consistency"],
                "fluency": mean["fluency"], "relevance": mean["relevance"], "human_score": mean[dim], "dimension": dim, "source_index": k,
            })
    return out


def load(spec: Spec) -> DataSet:
    """``summeval:WHERE[:dim=consistency|coherence|fluency|relevance][:n=N]``."""
    check_params(spec, ("dim", "n"))
    dim = choice_param(spec, "dim", "consistency", DIMENSIONS)
    n = int_param(spec, "n", None, minimum=1)
    loaded = load_split(spec, HUB)
    records = summeval_records(loaded.rows, dim)
    records = records[:n] if n is not None else records
    prov: Provenance = {"spec": spec.text, "family": "summeval", **loaded.record(HUB), "rule": {"unit": "article x machine summary", "dim": dim, "grades": "mean of 3 experts", "n": n}}
    return DataSet("summeval", records, prov, {"grade": _grade})


def _grade(records: Sequence[SummEvalRecord]) -> list[SummEvalRecord]:
    return [r.copy() for r in records]
