"""The sweep file (YAML) checked into typed values: each subject and local judge as a
:class:`~sleight.backends.spec.ModelSpec`, the trials as :class:`~sleight.tamper.job.TrialSettings`,
the jury, the report, the GPU the plan is for, and what the paper's tables need of each model
(display name, thinking capability, size, matched pairs). Pure but for reading the file: every
mistake is one line naming where it is."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from importlib import resources
from pathlib import Path
from typing import Any

from sleight.backends.spec import ModelSpec, options
from sleight.errors import UserError, parse_yaml
from sleight.tamper.job import TRIAL_KEYS, TrialSettings

SWEEPS_DATA = "data/sweeps"  # shipped sweep files, named by --config NAME
# What a model needs to load (a subject's or a local judge's): the ModelSpec's fields, by the same names.
LOAD_KEYS: tuple[str, ...] = tuple(f.name for f in fields(ModelSpec) if f.name not in ("model", "device", "batch_size", "threads"))
# Settings of the run that every subject shares: the trials and how the engines run on this machine.
RUN_KEYS: tuple[str, ...] = (*TRIAL_KEYS, "batch_size", "device", "threads")
TABLE_KEYS: tuple[str, ...] = ("display", "thinking_capable")
ESTIMATE_KEYS: tuple[str, ...] = ("params_b", "active_params_b", "bytes_per_param")

_NUMBER = (int, float)
_TRIAL_TYPES: dict[str, type] = {"questions": int, "substitutes": int, "max_new_tokens": int, "punctuation_led": bool, "live_rows": int}
# The type each key's value must have: a model key's from the spec's own options (one place).
_TYPES: dict[str, Any] = {
    **{name: opt.kind for name, opt in options()},
    **{f.name: _TRIAL_TYPES.get(f.name, str) for f in fields(TrialSettings)},
    "display": str, "thinking_capable": bool,
}  # fmt: skip


@dataclass(frozen=True)
class Model:
    """A subject of the sweep, or a judge: its spec, and what the tables and the estimates read."""

    name: str  # its run folder under out, and its name in the tables unless ``display`` says otherwise
    spec: ModelSpec
    display: str = ""  # the name the paper's tables print (Table 1)
    thinking_capable: bool = False  # a native reasoning-trace mode, active or not under the default template (Table 1's marks)
    params_b: float | None = None  # billions of parameters (the estimates, and the size statistic of the report)
    active_params_b: float | None = None  # read per token (a mixture of experts reads fewer)
    bytes_per_param: float | None = None  # overrides what quantization and dtype imply
    shards: int | None = None
    endpoint: str | None = None  # judges only: an OpenAI-compatible base URL
    lineage: str | None = None  # judges only

    @property
    def model(self) -> str:
        return self.spec.model

    @property
    def engine(self) -> str:
        return "openai" if self.endpoint else self.spec.engine

    @property
    def label(self) -> str:
        return self.display or self.name

    @property
    def juror(self) -> str:
        """The spec the jury names this judge by (a local judge's is its model)."""
        return f"openai:{self.endpoint}#{self.model}" if self.endpoint else self.model


@dataclass(frozen=True)
class Jury:
    judges: tuple[Model, ...]
    prompt: str = "default"
    prompt_file: Path | None = None
    vote: str = "auto"
    max_new_tokens: int = 256
    batch_size: int = 16
    concurrency: int = 8
    api_key_env: str = "OPENAI_API_KEY"
    device: str = "auto"


@dataclass(frozen=True)
class Gpu:
    """The GPU the estimates are for (the cost model's reference: one H100 SXM)."""

    name: str = "H100 SXM"
    memory_gib: float = 80.0
    bandwidth_gbs: float = 3350.0


@dataclass(frozen=True)
class SweepConfig:
    source: str  # the file (or "--models")
    out: Path | None
    subjects: tuple[Model, ...]
    trials: TrialSettings = field(default_factory=TrialSettings)
    shards: int = 1
    jury: Jury | None = None
    report_out: Path | None = None
    report_site: bool = True
    gpu: Gpu = field(default_factory=Gpu)
    pairs: tuple[tuple[str, str], ...] = ()  # (thinking model, its non-thinking sibling), by name


def _where(source: str, at: str) -> str:
    return f"sweep file {source}: {at}" if at else f"sweep file {source}"


def _mapping(value: Any, source: str, at: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise UserError(f"{_where(source, at)} must be a mapping")
    return {str(k): v for k, v in value.items()}


def _keys(data: Mapping[str, Any], allowed: Sequence[str], source: str, at: str) -> None:
    unknown = sorted(set(data) - set(allowed))
    if unknown:
        raise UserError(f"{_where(source, at)}: unknown key(s) {', '.join(unknown)} (allowed: {', '.join(allowed)})")


def _typed(value: Any, kind: type | tuple[type, ...], source: str, at: str, what: str) -> Any:
    if value is None:
        return None
    if isinstance(value, bool) and kind is not bool or not isinstance(value, kind):
        raise UserError(f"{_where(source, at)}: {what} must be {getattr(kind, '__name__', 'a number')} (got {value!r})")
    return value


def _checked(data: Mapping[str, Any], keys: Sequence[str], source: str, at: str) -> dict[str, Any]:
    return {k: _typed(data[k], _TYPES[k], source, at, k) for k in keys if data.get(k) is not None}


def _spec(model: str, settings: Mapping[str, Any], source: str, at: str) -> ModelSpec:
    try:
        return ModelSpec(model, **settings)
    except UserError as exc:
        raise UserError(f"{_where(source, at)}: {exc}") from None


def _model(entry: Any, source: str, at: str, *, judge: bool, shared: Mapping[str, Any] | None = None) -> Model:
    """One subject or judge; ``shared``: the settings every subject takes from ``run:``."""
    data = _mapping(entry, source, at)
    allowed = ["name", "model", *LOAD_KEYS, *TABLE_KEYS, *ESTIMATE_KEYS] + (["endpoint", "lineage"] if judge else ["shards"])
    _keys(data, allowed, source, at)
    model = _typed(data.get("model"), str, source, at, "model")
    if not model:
        raise UserError(f"{_where(source, at)}: no model (a hub id or a path{', or the served name of an endpoint' if judge else ''})")
    load = _checked(data, LOAD_KEYS, source, at)
    endpoint = _typed(data.get("endpoint"), str, source, at, "endpoint")
    served = sorted(k for k in load if k != "chat_template_kwargs")  # template arguments travel with each request
    if endpoint and served:
        raise UserError(f"{_where(source, at)}: an endpoint judge is loaded by its server; drop {', '.join(served)}")
    if model.startswith((".", "~")):
        model = str(Path(model).expanduser())
    est = {k: _typed(data.get(k), _NUMBER, source, at, k) for k in ESTIMATE_KEYS}
    for k, v in est.items():
        if v is not None and v <= 0:
            raise UserError(f"{_where(source, at)}: {k} must be positive (got {v})")
    shards = _typed(data.get("shards"), int, source, at, "shards")
    if shards is not None and shards < 1:
        raise UserError(f"{_where(source, at)}: shards must be at least 1 (got {shards})")
    name = _typed(data.get("name"), str, source, at, "name")
    if not name or not name.strip() or "/" in name or name in (".", ".."):
        raise UserError(f"{_where(source, at)}: give a name (its run folder under out, and its name in the tables)")
    table = _checked(data, TABLE_KEYS, source, at)
    return Model(
        name, _spec(model, {**dict(shared or {}), **load}, source, at), table.get("display", ""), bool(table.get("thinking_capable", False)),
        est["params_b"], est["active_params_b"], est["bytes_per_param"], shards, endpoint, _typed(data.get("lineage"), str, source, at, "lineage"),
    )  # fmt: skip


def parse_config(data: Any, source: str) -> SweepConfig:
    """A sweep file's content checked (pure): every mistake is one line naming where it is."""
    top = _mapping(data, source, "")
    _keys(top, ["out", "shards", "gpu", "run", "subjects", "pairs", "jury", "report"], source, "")
    run_raw = _mapping(top.get("run"), source, "run")
    _keys(run_raw, [*RUN_KEYS, *LOAD_KEYS], source, "run")
    run = _checked(run_raw, [*RUN_KEYS, *LOAD_KEYS], source, "run")
    shared = {k: v for k, v in run.items() if k not in TRIAL_KEYS}
    trials = trial_settings({k: v for k, v in run.items() if k in TRIAL_KEYS}, source)
    subjects_raw = top.get("subjects")
    if not isinstance(subjects_raw, list) or not subjects_raw:
        raise UserError(f"{_where(source, 'subjects')}: give a list of subject models")
    subjects = tuple(_model(e, source, f"subjects[{i + 1}]", judge=False, shared=shared) for i, e in enumerate(subjects_raw))
    seen: dict[str, str] = {}
    for m in subjects:
        if m.name in seen:
            raise UserError(f"{_where(source, 'subjects')}: '{seen[m.name]}' and '{m.model}' are both named {m.name}; give each its own name")
        seen[m.name] = m.model
    shards = _typed(top.get("shards", 1), int, source, "", "shards")
    if shards < 1:
        raise UserError(f"{_where(source, '')}: shards must be at least 1 (got {shards})")
    gpu_raw = _mapping(top.get("gpu"), source, "gpu")
    _keys(gpu_raw, ["name", "memory_gib", "bandwidth_gbs"], source, "gpu")
    gpu = Gpu(**{k: _typed(v, str if k == "name" else _NUMBER, source, "gpu", k) for k, v in gpu_raw.items()})
    jury = _jury(top.get("jury"), source) if top.get("jury") is not None else None
    report = _mapping(top.get("report"), source, "report")
    _keys(report, ["out", "site"], source, "report")
    out = _typed(top.get("out"), str, source, "", "out")
    report_out = _typed(report.get("out"), str, source, "report", "out")
    return SweepConfig(
        source, Path(out) if out else None, subjects, trials, shards, jury, Path(report_out) if report_out else None,
        bool(_typed(report.get("site", True), bool, source, "report", "site")), gpu, _pairs(top.get("pairs"), set(seen), source),
    )  # fmt: skip


def trial_settings(values: Mapping[str, Any], source: str) -> TrialSettings:
    """The ``run:`` section's trial settings (paths relative to where the command runs)."""
    vals = dict(values)
    for k in ("questions_file", "substitutes_file"):
        if vals.get(k) is not None:
            vals[k] = Path(vals[k]).expanduser()
    try:
        return TrialSettings(**vals)
    except UserError as exc:
        raise UserError(f"{_where(source, 'run')}: {exc}") from None


def _pairs(value: Any, names: set[str], source: str) -> tuple[tuple[str, str], ...]:
    """``pairs:``: ``[thinking model, its non-thinking sibling]`` by subject name (the paper's
    "thinking factor" comparisons)."""
    if value is None:
        return ()
    if not isinstance(value, list):
        raise UserError(f"{_where(source, 'pairs')}: give a list of [thinking model, sibling] name pairs")
    out = []
    for i, p in enumerate(value):
        if not (isinstance(p, list) and len(p) == 2 and all(isinstance(x, str) for x in p)):
            raise UserError(f"{_where(source, f'pairs[{i + 1}]')}: give two subject names, [thinking model, sibling]")
        unknown = [x for x in p if x not in names]
        if unknown:
            raise UserError(f"{_where(source, f'pairs[{i + 1}]')}: no subject named {', '.join(unknown)}")
        out.append((p[0], p[1]))
    return tuple(out)


def _jury(value: Any, source: str) -> Jury:
    data = _mapping(value, source, "jury")
    allowed = ["judges", "prompt", "prompt_file", "vote", "max_new_tokens", "batch_size", "concurrency", "api_key_env", "device"]
    _keys(data, allowed, source, "jury")
    raw = data.get("judges")
    if not isinstance(raw, list) or not raw:
        raise UserError(f"{_where(source, 'jury.judges')}: give a list of judges")
    judges = tuple(_model(e, source, f"jury.judges[{i + 1}]", judge=True) for i, e in enumerate(raw))
    specs = [j.juror for j in judges]
    for spec in specs:
        if specs.count(spec) > 1:
            raise UserError(f"{_where(source, 'jury.judges')}: judge '{spec}' appears twice; each juror must be a different model")
    lineages = [j.lineage.strip().lower() for j in judges if j.lineage]
    for lin in lineages:
        if lineages.count(lin) > 1:
            raise UserError(f"{_where(source, 'jury.judges')}: two judges of lineage '{lin}'; a jury's judges come from distinct lineages")
    kw: dict[str, Any] = {}
    for key, kind in (("prompt", str), ("vote", str), ("max_new_tokens", int), ("batch_size", int), ("concurrency", int), ("api_key_env", str), ("device", str)):
        if data.get(key) is not None:
            kw[key] = _typed(data[key], kind, source, "jury", key)
    if data.get("prompt_file") is not None:
        if data.get("prompt") is not None:
            raise UserError(f"{_where(source, 'jury')}: give prompt or prompt_file, not both")
        kw["prompt_file"] = Path(_typed(data["prompt_file"], str, source, "jury", "prompt_file")).expanduser()
    return Jury(judges, **kw)


def config_path(spec: str | Path) -> tuple[Path | None, str]:
    """The sweep file ``--config`` names: a file, or the name of a shipped one (``study``)."""
    p = Path(spec)
    if p.is_file():
        return p, p.read_text(encoding="utf-8")
    shipped = resources.files("sleight").joinpath(SWEEPS_DATA, f"{spec}.yaml")
    if p.suffix == "" and os.sep not in str(spec) and shipped.is_file():
        return None, shipped.read_text(encoding="utf-8")
    names = sorted(f.name.removesuffix(".yaml") for f in resources.files("sleight").joinpath(SWEEPS_DATA).iterdir() if f.name.endswith(".yaml"))
    raise UserError(f"--config {spec}: no such file, nor a shipped sweep file (shipped: {', '.join(names) or 'none'})")


def load_config(spec: str | Path) -> SweepConfig:
    """Read and check a sweep file (or a shipped one by name)."""
    path, text = config_path(spec)
    source = str(path) if path is not None else f"{spec} (shipped)"
    return parse_config(parse_yaml(text, f"sweep file {source}"), source)


def parse_models(text: str) -> list[str]:
    """``--models A,B,...`` (blank entries dropped)."""
    return [m.strip() for m in text.split(",") if m.strip()]


def models_config(models: Sequence[str], shards: int, name_of: Callable[[str], str]) -> SweepConfig:
    """The sweep ``--models A,B,...`` gives: those subjects, every setting from the command line."""
    if not models:
        raise UserError("--models names no model")
    if shards < 1:
        raise UserError(f"--shards must be at least 1 (got {shards})")
    names: dict[str, str] = {}
    for m in models:
        name = name_of(m)
        if name in names:
            raise UserError(f"--models {names[name]!r} and {m!r} would both write a folder named {name}; give each model once")
        names[name] = m
    return SweepConfig("--models", None, tuple(Model(name, ModelSpec(m)) for name, m in names.items()), shards=shards)
