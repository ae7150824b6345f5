"""A stratified, seeded sample for people to label: the human gold subset of both instruments.

``tamper gold`` stratifies judged trials by the jury's four labels
(:mod:`sleight.tamper.jury.gold`); ``readout labels --sample`` stratifies an audit's continuations by
variant group and the readout jury's class (:mod:`sleight.readout.audit.labels`). Both allocate with
:func:`allocate`, draw with :func:`draw` (pure), and keep what they drew in one JSON file of their
run folder through a :class:`SampleStore` (the one place that file's layout is written and read);
the labels people then give come back in a JSON file that :func:`read_labels_file` opens.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from sleight import rundir
from sleight.errors import UserError


def allocate(sizes: Mapping[str, int], n: int) -> dict[str, int]:
    """How many of ``n`` to draw from each stratum: proportional to its size, largest remainders
    first, at least one from every stratum while ``n`` allows it, never more than a stratum holds."""
    total = sum(sizes.values())
    n = min(n, total)
    if n <= 0:
        return {k: 0 for k in sizes}
    keys = sorted(sizes)
    take = {k: 0 for k in keys}
    if n >= len([k for k in keys if sizes[k]]):
        for k in keys:
            take[k] = 1 if sizes[k] else 0
    left = n - sum(take.values())
    while left > 0:
        quota = {k: n * sizes[k] / total - take[k] for k in keys if take[k] < sizes[k]}
        k = max(sorted(quota), key=lambda s: quota[s])
        take[k] += 1
        left -= 1
    return take


def draw(df: pd.DataFrame, n: int, seed: int, column: str = "stratum") -> pd.DataFrame:
    """``n`` rows of ``df`` stratified by ``column`` (seeded: the same inputs give the same rows, in
    ``df``'s order)."""
    df = df.reset_index(drop=True)
    sizes = {str(k): int(v) for k, v in df[column].value_counts().items()}
    take = allocate(sizes, n)
    rng = np.random.default_rng(seed)
    picked: list[int] = []
    for name in sorted(take):
        members = df.index[df[column] == name].to_numpy()
        if take[name]:
            picked += sorted(int(i) for i in rng.choice(members, size=take[name], replace=False))
    return df.loc[sorted(picked)].reset_index(drop=True)


@dataclass(frozen=True)
class SampleStore:
    """Where one instrument keeps its drawn sample: ``file`` in its run folder, the drawn rows under
    ``rows``, each named by the two ``key`` columns (and its stratum). ``redraw`` is the command that
    draws it again (``{folder}`` filled in), named when the file is damaged."""

    file: str
    rows: str
    key: tuple[str, str]
    redraw: str

    def write(self, folder: Path, sample: pd.DataFrame, *, header: Mapping[str, Any], seed: int, requested: int) -> Path:
        """``sample`` (its ``key`` columns and ``stratum``) into ``folder/file``, after ``header``
        (the file's format, version, and whatever else the instrument records first)."""
        obj = {
            **header,
            "seed": seed,
            "requested": requested,
            "strata": {str(k): int(v) for k, v in sample["stratum"].value_counts().sort_index().items()},
            self.rows: sample[[*self.key, "stratum"]].to_dict("records"),
            "drawn_at": rundir.now(),
        }
        return rundir.write_json(Path(folder) / self.file, obj)

    def load(self, folder: Path) -> list[tuple[str, str]]:
        """The drawn keys in ``folder``, ``[]`` when no sample was drawn."""
        path = Path(folder) / self.file
        if not path.is_file():
            return []
        obj = rundir.read_json(path, f"draw it again with '{self.redraw.format(folder=folder)}'")
        first, second = self.key
        return [(str(r[first]), str(r[second])) for r in obj.get(self.rows, [])]


def read_labels_file(path: Path, *, what: str, fmt: str, writer: str) -> dict[str, Any]:
    """A file of people's labels (``what``: its name in messages) whose ``"format"`` is ``fmt``, as
    ``writer`` writes it; one line naming the problem when it cannot be read or is another file."""
    try:
        obj = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise UserError(f"cannot read {what} {path} ({exc.strerror or exc})") from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise UserError(f"{what} {path} is not valid JSON ({exc})") from None
    if not isinstance(obj, dict) or obj.get("format") != fmt:
        raise UserError(f'{path} is not a {what} (expected "format": "{fmt}", as {writer})')
    return obj
