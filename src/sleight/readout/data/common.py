"""What every data loader shares: the ``--data`` spec, reading a split in the hub's own column
layout from a file, a cache directory or the hub, and the provenance recorded with the items.

A spec is ``FAMILY:WHERE[:key=value]...``:

* ``FAMILY``: ``race-h``, ``mmlu``, ``triviaqa``, ``mmlu-pro``, ``summeval`` (see :mod:`sleight.readout.data`);
* ``WHERE``: a file (``.parquet``, ``.jsonl``, ``.json``, ``.csv``, ``.arrow``) with the hub's own
  columns; a directory (a Hugging Face hub cache ``datasets--ORG--NAME`` or one of its
  ``snapshots/<revision>`` folders, a ``datasets`` cache folder such as ``ehovy___race``, or any folder
  holding the split's files), searched for the family's config and split; or ``hub`` / ``hub@REVISION``
  (through the optional ``datasets`` package, only when it is importable and ``HF_HUB_OFFLINE`` is not set);
* ``key=value``: the family's own parameters (``n=``, ``seed=``, ``variant=`` ...), validated by the family.

Every load returns a :class:`DataSet`: the family's records (:mod:`.records`) and a provenance dictionary (the source
kind, the dataset id, config, split, the revision where it is known, each file read with its sha256,
and the rule's parameters), which the readout commands write into their run directories.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Generic, TypedDict, TypeVar

from sleight.errors import UserError
from sleight.readout.data.records import PtruePair, UseRecord
from sleight.readout.items import jsonl_objects

TABLE_SUFFIXES = (".parquet", ".jsonl", ".json", ".csv", ".arrow")
_SHA = re.compile(r"^[0-9a-f]{40}$")


@dataclass(frozen=True)
class HubSplit:
    """Where a family's split lives on the hub: dataset id, config, split, and the pinned revision."""

    dataset: str
    config: str | None
    split: str
    revision: str | None

    def file_hint(self) -> str:
        """The file name the hub stores this split under (for error messages)."""
        folder = f"{self.config}/" if self.config else ""
        return f"{folder}{self.split}-00000-of-00001.parquet"


@dataclass(frozen=True)
class Spec:
    """A parsed ``--data`` spec."""

    family: str
    where: str
    params: Mapping[str, str] = field(default_factory=dict)
    text: str = ""

    @property
    def hub_revision(self) -> str | None:
        """``hub@REV`` -> REV; ``hub`` -> None."""
        return self.where.partition("@")[2] or None

    @property
    def is_hub(self) -> bool:
        return self.where == "hub" or self.where.startswith("hub@")


def parse_spec(text: str, families: Sequence[str]) -> Spec:
    """``FAMILY:WHERE[:key=value]...`` -> :class:`Spec` (one UserError line for a malformed spec)."""
    family, sep, rest = text.partition(":")
    if family not in families or not sep or not rest:
        raise UserError(f"--data '{text}': expected FAMILY:FILE[:key=value...] with FAMILY one of {', '.join(families)} (or hf:NAME, or a .jsonl/.csv file)")
    parts = rest.split(":")
    params: dict[str, str] = {}
    while len(parts) > 1 and re.fullmatch(r"[a-z_]+=.*", parts[-1]):
        key, _, value = parts.pop().partition("=")
        if key in params:
            raise UserError(f"--data '{text}': '{key}' given twice")
        params[key] = value
    return Spec(family, ":".join(parts), dict(reversed(list(params.items()))), text)


def int_param(spec: Spec, key: str, default: int | None, *, minimum: int | None = None) -> int | None:
    """An integer parameter of the spec (``n=500``), its default when absent."""
    raw = spec.params.get(key)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise UserError(f"--data '{spec.text}': '{key}' must be an integer, got {raw!r}") from None
    if minimum is not None and value < minimum:
        raise UserError(f"--data '{spec.text}': '{key}' must be at least {minimum}, got {value}")
    return value


def choice_param(spec: Spec, key: str, default: str, choices: Sequence[str]) -> str:
    value = spec.params.get(key, default)
    if value not in choices:
        raise UserError(f"--data '{spec.text}': '{key}' must be one of {', '.join(choices)}, got {value!r}")
    return value


def check_params(spec: Spec, known: Sequence[str]) -> None:
    unknown = sorted(set(spec.params) - set(known))
    if unknown:
        raise UserError(f"--data '{spec.text}': unknown parameter(s) {', '.join(unknown)} for {spec.family} (known: {', '.join(known) or 'none'})")


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


# ------------------------------------------------------------------------------------------------
# reading one table file in the hub's column layout
# ------------------------------------------------------------------------------------------------


def read_table(path: str | Path) -> list[dict[str, object]]:
    """Rows of one file as dictionaries, columns as the hub stores them (nested lists and structs
    kept; each family checks the cells it reads, :func:`text` ...): Parquet, Arrow (the ``datasets`` cache's stream files), JSON Lines, JSON (a list of rows,
    or ``{"data": [...]}``, or a column dictionary) or CSV (cells that hold JSON lists/objects decoded)."""
    p = Path(path)
    if not p.is_file():
        raise UserError(f"data file not found: {p}")
    suffix = p.suffix.lower()
    try:
        if suffix == ".parquet":
            import pyarrow.parquet as pq

            return pq.read_table(p).to_pylist()
        if suffix == ".arrow":
            import pyarrow as pa

            with open(p, "rb") as f:
                try:
                    return pa.ipc.open_stream(f).read_all().to_pylist()
                except pa.ArrowInvalid:
                    f.seek(0)
                    return pa.ipc.open_file(f).read_all().to_pylist()
        if suffix == ".csv":
            return _read_csv(p)
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise UserError(f"{p.name}: not UTF-8 text at byte {exc.start}; save the file as UTF-8") from None
    except UserError:
        raise
    except Exception as exc:  # pyarrow raises several types for a damaged or foreign file
        raise UserError(f"{p.name}: cannot be read as {suffix[1:]} ({str(exc).splitlines()[0] if str(exc) else type(exc).__name__})") from None
    if suffix == ".json":
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as exc:
            raise UserError(f"{p.name}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
        if isinstance(obj, dict) and isinstance(obj.get("data"), list):
            obj = obj["data"]
        if isinstance(obj, dict) and obj and all(isinstance(v, list) for v in obj.values()):
            n = len(next(iter(obj.values())))
            obj = [{k: v[i] for k, v in obj.items()} for i in range(n)]
        if not isinstance(obj, list) or not all(isinstance(r, dict) for r in obj):
            raise UserError(f"{p.name}: expected a JSON list of row objects")
        return obj
    return [rec for rec, _ in jsonl_objects(text, p.name)]


def _read_csv(p: Path) -> list[dict[str, object]]:
    import csv
    import io

    rows = []
    with io.StringIO(p.read_text(encoding="utf-8"), newline="") as f:
        for row in csv.DictReader(f):
            rec: dict[str, object] = {}
            for key, cell in row.items():
                if cell is not None and re.match(r"^\s*[\[{]", cell):
                    try:
                        rec[key] = json.loads(cell)
                        continue
                    except json.JSONDecodeError:
                        pass
                rec[key] = cell
            rows.append(rec)
    return rows


def _cell(row: Mapping[str, object], key: str, where: str, what: str) -> str:
    return f"{where}: column '{key}' must be {what}, got {type(row.get(key)).__name__}"


def text(row: Mapping[str, object], key: str, where: str) -> str:
    """A row's string cell (``where`` names the row in the one-line error otherwise)."""
    value = row.get(key)
    if not isinstance(value, str):
        raise UserError(_cell(row, key, where, "a string"))
    return value


def cells(row: Mapping[str, object], key: str, where: str) -> list[object]:
    """A row's list cell (a sequence column, such as RACE's ``options``)."""
    value = row.get(key)
    if not isinstance(value, list):
        raise UserError(_cell(row, key, where, "a list"))
    return value


def texts(row: Mapping[str, object], key: str, where: str) -> list[str]:
    """A row's list-of-strings cell."""
    value = cells(row, key, where)
    if not all(isinstance(v, str) for v in value):
        raise UserError(_cell(row, key, where, "a list of strings"))
    return [str(v) for v in value]


def struct(row: Mapping[str, object], key: str, where: str) -> Mapping[str, object]:
    """A row's struct cell (an object, such as TriviaQA's ``answer``)."""
    value = row.get(key)
    if not isinstance(value, dict):
        raise UserError(_cell(row, key, where, "an object"))
    return value


# ------------------------------------------------------------------------------------------------
# finding a split: a file, a cache directory, the hub
# ------------------------------------------------------------------------------------------------


class FileDigest(TypedDict):
    """One file a split was read from and its sha256 ("" when the hub's cache gave no digest)."""

    path: str
    sha256: str


class SplitRecord(TypedDict):
    """Where one split came from (:meth:`Loaded.record`): the source kind, the hub's names, the
    revision found and the one pinned, each file read, the row count."""

    source: str  # file | cache | hub
    dataset: str
    config: str | None
    split: str
    revision: str | None
    pinned_revision: str | None
    files: list[FileDigest]
    n_rows: int


class _Provenance(SplitRecord):
    spec: str
    family: str
    rule: dict[str, object]  # the family's rule and its parameters


class Provenance(_Provenance, total=False):
    """A load's provenance: the spec and family, the (first) split's :class:`SplitRecord` keys at the
    top level, and the family's own: the layout read, the few-shot split, every split read, the
    rule's parameters and the draw's counts (a JSON object; keys in the order the families build it)."""

    layout: str
    fewshot: SplitRecord
    splits: dict[str, SplitRecord]
    counts: dict[str, int]


@dataclass
class Loaded:
    """A split's rows and where they came from."""

    rows: list[dict[str, object]]  # the hub's columns, as read (:func:`read_table`)
    source: str  # file | cache | hub
    files: list[FileDigest]
    revision: str | None

    def record(self, hub: HubSplit) -> SplitRecord:
        return {
            "source": self.source,
            "dataset": hub.dataset,
            "config": hub.config,
            "split": hub.split,
            "revision": self.revision,
            "pinned_revision": hub.revision,
            "files": self.files,
            "n_rows": len(self.rows),
        }


def _split_pattern(split: str) -> re.Pattern[str]:
    return re.compile(rf"(^|[-_.]){re.escape(split)}([-_.]|$)")


def revision_from_path(path: Path) -> str | None:
    """The commit a hub cache file belongs to (``.../snapshots/<sha>/...``), or that a ``datasets``
    cache folder's ``dataset_info.json`` names in its download URLs (``...@<sha>/...``)."""
    parts = path.resolve().parts
    for k, part in enumerate(parts[:-1]):
        if part == "snapshots" and _SHA.match(parts[k + 1]):
            return parts[k + 1]
    for folder in [path.parent, *path.parents][:3]:
        info = folder / "dataset_info.json"
        if info.is_file():
            found = set(re.findall(r"@([0-9a-f]{40})/", info.read_text(encoding="utf-8", errors="replace")))
            if len(found) == 1:
                return found.pop()
    return None


def find_split_files(root: Path, config: str | None, split: str) -> list[Path]:
    """The files of ``split`` (and ``config`` where the folder has per-config subfolders) under ``root``."""
    if (root / "snapshots").is_dir():  # a hub cache repo folder: the snapshot refs/main points at
        ref = root / "refs" / "main"
        snaps = sorted((root / "snapshots").iterdir())
        if ref.is_file() and (root / "snapshots" / ref.read_text().strip()).is_dir():
            root = root / "snapshots" / ref.read_text().strip()
        elif len(snaps) == 1:
            root = snaps[0]
        else:
            raise UserError(f"{root}: several snapshots and no refs/main; pass one of {', '.join(s.name for s in snaps)}")
    pat = _split_pattern(split)
    files = [f for f in sorted(root.rglob("*")) if f.is_file() and f.suffix.lower() in TABLE_SUFFIXES and pat.search(f.stem)]
    if config:
        in_config = [f for f in files if config in f.relative_to(root).parts[:-1]]
        files = in_config or files
    folders = sorted({str(f.parent) for f in files})
    if len(folders) > 1:
        raise UserError(f"{root}: the '{split}' split is in several folders ({'; '.join(folders)}); pass one file")
    return files


def load_split(spec: Spec, hub: HubSplit, *, split: str | None = None, where: str | None = None) -> Loaded:
    """The rows of one split from the spec's file, directory or the hub (``split``/``where``
    override the spec's, for a second split such as few-shot examples)."""
    split = split or hub.split
    target = HubSplit(hub.dataset, hub.config, split, hub.revision)
    where = where if where is not None else spec.where
    if where == "hub" or where.startswith("hub@"):
        return _from_hub(spec, target, where.partition("@")[2] or hub.revision)
    path = Path(where).expanduser()
    if path.is_dir():
        files = find_split_files(path, hub.config, split)
        if not files:
            raise UserError(f"{path}: no '{split}' file for {hub.dataset} ({hub.config or 'default'}) here; pass the file, e.g. {target.file_hint()}")
        rows: list[dict[str, object]] = []
        for f in files:
            rows.extend(read_table(f))
        return Loaded(rows, "cache", [{"path": str(f), "sha256": sha256_file(f)} for f in files], revision_from_path(files[0]))
    if not path.exists():
        raise UserError(f"data file not found: {path} (pass {hub.dataset}'s {target.file_hint()} in the hub's own columns)")
    return Loaded(read_table(path), "file", [{"path": str(path), "sha256": sha256_file(path)}], revision_from_path(path))


def hub_reachable() -> str | None:
    """None when the hub path may be tried, else why not."""
    try:
        import datasets  # noqa: F401
    except ImportError:
        return "the 'datasets' package is not installed"
    if os.environ.get("HF_HUB_OFFLINE", "").strip() not in ("", "0"):
        return "HF_HUB_OFFLINE is set"
    return None


def _from_hub(spec: Spec, hub: HubSplit, revision: str | None) -> Loaded:
    why = hub_reachable()
    if why is not None:
        raise UserError(f"--data '{spec.text}': the hub cannot be used ({why}); pass the file instead: {spec.family}:PATH/{hub.file_hint()}")
    from datasets import load_dataset

    try:
        ds = load_dataset(hub.dataset, hub.config, split=hub.split, revision=revision)
    except Exception as exc:  # datasets raises many types for "offline / unknown / not cached"
        raise UserError(f"could not load {hub.dataset} ({hub.config or 'default'}, {hub.split}) at revision {revision or 'main'}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from None
    files: list[FileDigest] = [{"path": f["filename"], "sha256": ""} for f in getattr(ds, "cache_files", [])]
    return Loaded([dict(r) for r in ds], "hub", files, revision)


# ------------------------------------------------------------------------------------------------
# the result of a load
# ------------------------------------------------------------------------------------------------


R = TypeVar("R", bound=Mapping[str, object])  # a family's record (sleight.readout.data.records)
View = Callable[[Sequence[R]], Sequence[UseRecord]]  # a use's records from a family's


@dataclass
class DataSet(Generic[R]):
    """A family's records (in the family's canonical fields, :mod:`.records`) and their provenance.

    ``views`` maps a use (``forecast``, ``ptrue``, ``qa``, ``grade``, ``mcq``) to a function from the
    records to that use's records; :meth:`view` refuses a use the family has no data for, in one line."""

    family: str
    records: list[R]
    provenance: Provenance
    views: Mapping[str, View[R]] = field(default_factory=dict)

    def view(self, use: str, limit: int | None = None) -> Sequence[UseRecord]:
        """The records for ``use`` (the first ``limit`` of the family's order)."""
        if use not in self.views:
            raise UserError(f"{self.family} data has no records for {use} (it serves: {', '.join(self.views) or 'nothing'})")
        recs = self.records[:limit] if limit is not None else self.records
        return self.views[use](recs)

    def describe(self) -> str:
        """One line: the spec, the revision or the first file's sha256, the count."""
        p = self.provenance
        rev = p.get("revision")
        files = p.get("files") or []
        pin = f"revision {rev}" if rev else (f"sha256 {files[0]['sha256'][:12]}" if files and files[0].get("sha256") else "revision unknown")
        return f"{p.get('spec', self.family)} ({pin}; {len(self.records)} items)"


def lettered_ptrue_records(records: Sequence[Mapping[str, object]]) -> list[PtruePair]:
    """Lettered records (``id, question, choices[4], answer`` letter, optional ``passage``/``input``/
    ``instruction``) as P(True) preset records (``id, question, answers, wrong, instruction``): the
    question quoted is the text the model answers (:attr:`sleight.readout.ptrue.answers.QAItem.prompt`),
    the accepted answer the gold letter, the wrong one the seeded non-gold letter (App. E prints letters)
    (:func:`sleight.readout.ptrue.pipeline.printed_wrong_letter`, the draw
    :func:`~sleight.readout.ptrue.pipeline.constructed_pairs` prints), and the quoted item's
    instruction (what the paper's Deleted readout deletes), so ``readout audit --preset ptrue`` and
    ``readout ptrue --answers constructed`` quote the same pairs."""
    from sleight.readout.items import printed_wrong_letter, qa_item_from_record

    out = []
    for k, rec in enumerate(records):
        item = qa_item_from_record(rec, f"record {k + 1}")
        assert item.choices is not None and item.gold_letter is not None
        wrong = printed_wrong_letter(item.id, item.gold_letter)
        pair: PtruePair = {"id": item.id, "question": item.prompt, "answers": [item.gold_letter], "wrong": wrong}
        if item.instruction_text is not None:
            pair["instruction"] = item.instruction_text
        out.append(pair)
    return out


def fewshot_where(spec: Spec, eval_split: str, fewshot_split: str, hint: str) -> str:
    """Where lm-polygraph's few-shot split is: ``fewshot=FILE``, the spec's folder (or the hub), or
    the evaluation file's sibling with ``eval_split`` in its name replaced by ``fewshot_split``;
    otherwise one line naming the file to pass (``hint``)."""
    if "fewshot" in spec.params:
        return spec.params["fewshot"]
    path = Path(spec.where)
    if spec.is_hub or path.is_dir():
        return spec.where
    sibling = path.with_name(path.name.replace(eval_split, fewshot_split))
    if sibling != path and sibling.is_file():
        return str(sibling)
    raise UserError(f"--data '{spec.text}': {hint}")
