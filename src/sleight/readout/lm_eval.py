"""An lm-evaluation-harness multiple-choice task (its YAML and its data) as audit items.

Supported task keys: ``dataset_path`` (``json``/``csv``/``parquet`` with ``dataset_kwargs.data_files``
relative to the YAML, or a HF dataset from the cache via ``datasets``), ``dataset_name``,
``test_split``/``validation_split``/``training_split`` (first present wins), ``doc_to_text``,
``doc_to_choice``, ``doc_to_target`` (a column name, a Jinja template, a literal list or an int),
``target_delimiter`` (default ``" "``). Each option is ``target_delimiter + choice``, as the harness
scores it. By default the context is ``doc_to_text`` as is (no chat template), as the harness
scores it without ``--apply_chat_template``. ``chat: true`` (our key, or ``--lm-eval-chat``) reproduces ``--apply_chat_template``:
the harness moves the context's trailing whitespace into every continuation, so the options are
scored as ``"\\n" + option`` right after ``assistant`` (``move_trailing_whitespace``).
``!function`` hooks and ``include`` are not supported (a clear error says so).
"""

from __future__ import annotations

import ast
import csv
import json
from pathlib import Path
from typing import Any, Mapping

import yaml

from sleight.errors import UserError
from sleight.readout.items import AuditItem, validate_options


def _load_yaml(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise UserError(f"task file not found: {path}")
    try:
        cfg = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.constructor.ConstructorError as exc:
        raise UserError(f"{path.name}: unsupported YAML tag ({exc.problem}); '!function' hooks cannot be audited without the harness") from None
    except yaml.YAMLError as exc:
        raise UserError(f"{path.name}: not valid YAML ({str(exc).splitlines()[0]})") from None
    if not isinstance(cfg, dict):
        raise UserError(f"{path.name}: expected a mapping of task keys")
    if "include" in cfg:
        raise UserError(f"{path.name}: 'include' is not supported; inline the included keys")
    if cfg.get("output_type", "multiple_choice") != "multiple_choice":
        raise UserError(f"{path.name}: output_type is {cfg.get('output_type')!r}; only multiple_choice tasks have an option set to audit")
    for key in ("doc_to_text", "doc_to_choice"):
        if key not in cfg:
            raise UserError(f"{path.name}: missing '{key}'")
    return cfg


def _split(cfg: Mapping[str, Any]) -> str:
    for key in ("test_split", "validation_split", "training_split"):
        if cfg.get(key):
            return str(cfg[key])
    return "test"


def _local_rows(path: Path, cfg: Mapping[str, Any], split: str) -> list[dict[str, Any]]:
    files = (cfg.get("dataset_kwargs") or {}).get("data_files")
    if isinstance(files, Mapping):
        files = files.get(split) or next(iter(files.values()), None)
    if isinstance(files, list):
        files = files[0] if files else None
    if not files:
        raise UserError(f"{path.name}: dataset_path '{cfg['dataset_path']}' needs dataset_kwargs.data_files")
    data = (path.parent / str(files)).resolve()
    if not data.is_file():
        raise UserError(f"{path.name}: data file not found: {data}")
    kind = cfg["dataset_path"]
    if kind == "csv":
        with data.open(encoding="utf-8", newline="") as f:
            return list(csv.DictReader(f))
    if kind == "parquet":
        import pyarrow.parquet as pq

        return pq.read_table(data).to_pylist()
    text = data.read_text(encoding="utf-8")
    if text.lstrip().startswith("["):
        return json.loads(text)
    rows = []
    for n, line in enumerate(text.splitlines(), start=1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise UserError(f"{data.name} line {n}: not valid JSON ({exc.msg})") from None
    return rows


def _rows(path: Path, cfg: Mapping[str, Any]) -> list[dict[str, Any]]:
    split = _split(cfg)
    if cfg.get("dataset_path") in ("json", "csv", "parquet"):
        return _local_rows(path, cfg, split)
    from sleight.readout.sources import _load_dataset

    return [dict(r) for r in _load_dataset(str(cfg.get("dataset_path")), cfg.get("dataset_name"), split)]


def _render(spec: Any, doc: Mapping[str, Any]) -> Any:
    """lm-eval's doc_to_* semantics: a column name, a Jinja template, or a literal."""
    if isinstance(spec, str):
        if spec in doc:
            return doc[spec]
        from jinja2 import Environment, StrictUndefined

        return Environment(undefined=StrictUndefined).from_string(spec).render(**doc)
    return spec


def _choices(spec: Any, doc: Mapping[str, Any]) -> list[str]:
    value = _render(spec, doc)
    if isinstance(value, str):
        try:
            value = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            raise UserError(f"doc_to_choice gave {value!r}, not a list") from None
    if isinstance(value, Mapping):
        value = list(value.values())
    return [str(v) for v in value]


def _target(spec: Any, doc: Mapping[str, Any], choices: list[str]) -> int:
    value = _render(spec, doc) if spec is not None else None
    if isinstance(value, str):
        v = value.strip()
        if v.isdigit():
            return int(v)
        if v in choices:
            return choices.index(v)
        if len(v) == 1 and v.upper() in "ABCDEFGHIJ":
            return "ABCDEFGHIJ".index(v.upper())
        raise UserError(f"doc_to_target gave {value!r}: not an index, a choice or a letter")
    return int(value) if value is not None else -1


def load_lm_eval_task(path: str | Path, *, chat: bool | None = None, limit: int | None = None) -> list[AuditItem]:
    """Audit items from an lm-evaluation-harness multiple-choice task YAML and its data."""
    p = Path(path)
    cfg = _load_yaml(p)
    rows = _rows(p, cfg)
    if limit:
        rows = rows[:limit]
    delim = cfg.get("target_delimiter", " ")
    use_chat = bool(cfg.get("chat", False)) if chat is None else chat
    task = str(cfg.get("task", p.stem))
    items = []
    for k, doc in enumerate(rows):
        where = f"{p.name} doc {k}"
        try:
            text = str(_render(cfg["doc_to_text"], doc))
            choices = _choices(cfg["doc_to_choice"], doc)
            gold = _target(cfg.get("doc_to_target"), doc, choices)
        except UserError as exc:
            raise UserError(f"{where}: {exc}") from None
        except Exception as exc:  # a template error names the doc
            raise UserError(f"{where}: template failed ({type(exc).__name__}: {exc})") from None
        items.append(
            AuditItem(
                id=f"{task}-{k}",
                messages=({"role": "user", "content": text},),
                options=validate_options([delim + c for c in choices], where),
                choices=tuple(choices),
                move_trailing_whitespace=use_chat,
                chat_template=use_chat,
                meta={"gold": gold, "task": task},
            )
        )
    if not items:
        raise UserError(f"{p.name}: the task has no documents")
    return items
