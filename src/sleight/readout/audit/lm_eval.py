"""An lm-evaluation-harness multiple-choice task (its YAML and its data) as audit items.

The requests are built as lm-evaluation-harness 0.4.13 builds them (file and line of the wheel):

* ``doc_to_text`` / ``doc_to_choice`` / ``doc_to_target``: a column name, else a Jinja template
  rendered with the harness's environment (``StrictUndefined``, ``keep_trailing_newline=True``,
  the ``regex_replace`` filter; ``lm_eval/utils.py`` 611-624), or a literal;
* the context is the ``description`` (if any) followed by ``doc_to_text``; with the chat template
  (``chat: true`` in the YAML, or ``--lm-eval-chat``: the harness's ``--apply_chat_template``) the
  description is a system turn and the text one user turn, rendered with the generation prompt
  (``api/task.py`` 974-979 and 1025-1040, ``api/utils.py`` 65-83, ``models/huggingface.py``
  1718-1729);
* each continuation is ``target_delimiter + choice``, except with the chat template, where the
  harness drops the delimiter (``api/task.py`` 1376-1390);
* ``TemplateLM._encode_pair`` (``api/model.py`` 413-431) moves the context's trailing whitespace
  into every continuation, in both modes: after a template's ``assistant\n`` the options are scored
  as ``"\n" + choice`` (``move_trailing_whitespace``).

One difference stays: the harness slices ``tok(c ‖ o)`` after ``len(tok(c))`` tokens even when the
tokenizer merges across the boundary; the audit reports no option score there (the prefix
condition, :func:`sleight.position.encode_continuation`).

``dataset_path`` ``json``/``csv``/``parquet`` read ``dataset_kwargs.data_files`` the way
``datasets.load_dataset`` does for the harness (``api/task.py`` 869-873): relative to the working
directory; a file found only next to the YAML is used with a note on stderr. Any other
``dataset_path`` is a HF dataset from the local cache (``datasets``). ``!function`` hooks,
``include``, ``gen_prefix`` and few-shot examples are not supported (a clear error says so).
"""

from __future__ import annotations

import ast
import csv
import io
import json
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from sleight.errors import UserError
from sleight.readout.audit.items import AuditItem, validate_options
from sleight.readout.items import read_text


def _load_yaml(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise UserError(f"task file not found: {path}")
    try:
        cfg = yaml.safe_load(read_text(path))
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
    if cfg.get("gen_prefix"):
        raise UserError(f"{path.name}: 'gen_prefix' is not supported; audit the task without it")
    if int(cfg.get("num_fewshot") or 0) > 0:
        raise UserError(f"{path.name}: few-shot examples (num_fewshot {cfg['num_fewshot']}) are not supported; audit it zero-shot")
    return cfg


def _split(cfg: Mapping[str, Any]) -> str:
    for key in ("test_split", "validation_split", "training_split"):
        if cfg.get(key):
            return str(cfg[key])
    return "test"


def data_file(task_yaml: Path, name: str) -> Path:
    """Where ``datasets.load_dataset`` finds a relative data file for the harness: the working
    directory. A file found only next to the task YAML is used, with a note on stderr."""
    here = Path(name)
    if here.is_file():
        return here.resolve()
    beside = (task_yaml.parent / name).resolve()
    if not here.is_absolute() and beside.is_file():
        print(f"sleight: note: {name} is not in the working directory (where lm-evaluation-harness looks); using {beside}", file=sys.stderr)
        return beside
    raise UserError(f"{task_yaml.name}: data file not found: {name} (relative paths are read from the working directory, as the harness reads them)")


def _local_rows(path: Path, cfg: Mapping[str, Any], split: str) -> list[dict[str, Any]]:
    files = (cfg.get("dataset_kwargs") or {}).get("data_files")
    if isinstance(files, Mapping):
        files = files.get(split) or next(iter(files.values()), None)
    names = [str(f) for f in files] if isinstance(files, list) else [str(files)] if files else []
    if not names:
        raise UserError(f"{path.name}: dataset_path '{cfg['dataset_path']}' needs dataset_kwargs.data_files")
    return [row for name in names for row in _file_rows(data_file(path, name), cfg)]


def _file_rows(data: Path, cfg: Mapping[str, Any]) -> list[dict[str, Any]]:
    kind = cfg["dataset_path"]
    if kind == "csv":
        return list(csv.DictReader(io.StringIO(read_text(data), newline="")))
    if kind == "parquet":
        import pyarrow.parquet as pq

        return pq.read_table(data).to_pylist()
    text = read_text(data)
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
    from sleight.readout.audit.sources import _load_dataset

    return [dict(r) for r in _load_dataset(str(cfg.get("dataset_path")), cfg.get("dataset_name"), split)]


def _jinja() -> Any:
    """The harness's template environment (``lm_eval/utils.py`` 611-624)."""
    from jinja2 import BaseLoader, Environment, StrictUndefined

    env = Environment(loader=BaseLoader(), undefined=StrictUndefined, keep_trailing_newline=True)
    env.filters["regex_replace"] = lambda string, pattern, repl, count=0: re.sub(pattern, repl, string, count=count)
    return env


def _render(spec: Any, doc: Mapping[str, Any]) -> Any:
    """lm-eval's doc_to_* semantics: a column name, a Jinja template, or a literal."""
    if isinstance(spec, str):
        if spec in doc:
            return doc[spec]
        return _jinja().from_string(spec).render(**doc)
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
    if limit is not None:
        rows = rows[:limit]
    use_chat = bool(cfg.get("chat", False)) if chat is None else chat
    delim = "" if use_chat else str(cfg.get("target_delimiter", " "))  # api/task.py 1376-1383
    task = str(cfg.get("task", p.stem))
    items = []
    for k, doc in enumerate(rows):
        where = f"{p.name} doc {k}"
        try:
            text = str(_render(cfg["doc_to_text"], doc))
            description = str(_render(cfg["description"], doc)) if cfg.get("description") else ""
            choices = _choices(cfg["doc_to_choice"], doc)
            gold = _target(cfg.get("doc_to_target"), doc, choices)
        except UserError as exc:
            raise UserError(f"{where}: {exc}") from None
        except Exception as exc:  # a template error names the doc
            raise UserError(f"{where}: template failed ({type(exc).__name__}: {exc})") from None
        messages: tuple[dict[str, str], ...]
        if use_chat:
            messages = ({"role": "system", "content": description},) if description else ()
            messages += ({"role": "user", "content": text},)
        else:
            messages = ({"role": "user", "content": description + text},)
        items.append(
            AuditItem(
                id=f"{task}-{k}",
                messages=messages,
                options=validate_options([delim + c for c in choices], where),
                choices=tuple(choices),
                move_trailing_whitespace=True,
                chat_template=use_chat,
                meta={"gold": gold, "task": task},
            )
        )
    if not items:
        raise UserError(f"{p.name}: the task has no documents")
    return items
