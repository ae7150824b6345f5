"""What decides a run's records: config differences, the model's identity, fingerprints, shards.

One refusal rule: a run is resumed only with the config it was made with; otherwise one line names
each differing field (:func:`config_diff`). A shard ``K/N`` (:class:`Shard`) is the units ``i`` with
``i % N == K - 1``; a run is complete once its completed shards cover every unit (:func:`covered`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from sleight.errors import UserError
from sleight.rundir.files import json_safe

# The parts of a model record that must match for a run to be resumed (device, batch size may differ).
MODEL_IDENTITY = ("model_id", "revision", "chat_template_sha256", "engine", "dtype")
# A served model's tokenizer record is a hash of what the server shows (its surface strings, end ids,
# a probe's ids): an identity, since its served name is whatever the server was told to call it.
# A local tokenizer's record names its class and folder, which move between machines.
SERVED_TOKENIZER = "served:"


def _show(v: object) -> str:
    text = repr(v)
    return text if len(text) <= 48 else text[:45] + "..."


def config_diff(old: Mapping[str, object], new: Mapping[str, object], keys: Sequence[str] | None = None, prefix: str = "") -> list[str]:
    """``field: <old> there, <new> here`` for each differing field (nested dicts by dotted name)."""
    names = list(keys) if keys is not None else list(dict.fromkeys([*old, *new]))
    out = []
    for k in names:
        a, b = json_safe(old.get(k)), json_safe(new.get(k))
        if a == b:
            continue
        if isinstance(a, dict) and isinstance(b, dict):
            out += config_diff(a, b, None, f"{prefix}{k}.")
        else:
            out.append(f"{prefix}{k}: {_show(a)} there, {_show(b)} here")
    return out


def identity(config: Mapping[str, object], keys: Sequence[str] | None) -> dict[str, object]:
    return dict(config) if keys is None else {k: config.get(k) for k in keys}


def model_identity(model: Mapping[str, object] | None) -> dict[str, object]:
    """The model fields that decide records; chat-template arguments (``--thinking``, ...) and load
    settings (``--quantization``, ...) only when given, so a run made before they were recorded
    resumes under the same fingerprint."""
    m: Mapping[str, object] = model or {}
    ident = {k: m.get(k) for k in MODEL_IDENTITY}
    if str(m.get("tokenizer") or "").startswith(SERVED_TOKENIZER):  # a content hash, unlike a local tokenizer's path
        ident["tokenizer"] = m["tokenizer"]
    for extra in ("chat_template_kwargs", "load"):  # the template variables; revision, quantization, ... as loaded
        value = m.get(extra)
        if value:
            ident[extra] = dict(value) if isinstance(value, Mapping) else value
    return ident


def fingerprint(config: Mapping[str, object], model: Mapping[str, object] | None, keys: Sequence[str] | None = None) -> str:
    """sha256 of what decides the records: the identity part of the config and the model's identity."""
    payload = json.dumps(
        json_safe({"config": identity(config, keys), "model": model_identity(model)}), sort_keys=True, default=str
    )
    return hashlib.sha256(payload.encode()).hexdigest()


def digest(obj: object) -> str:
    """sha256 of a JSON-able value (inputs such as items or questions)."""
    return hashlib.sha256(json.dumps(json_safe(obj), ensure_ascii=False, sort_keys=True, default=str).encode()).hexdigest()


@dataclass(frozen=True)
class Shard:
    """Shard ``k`` of ``n`` (1-based): the units ``i`` with ``i % n == k - 1``."""

    k: int = 1
    n: int = 1

    def __str__(self) -> str:
        return f"{self.k}/{self.n}"

    def __contains__(self, i: object) -> bool:
        return isinstance(i, int) and i % self.n == self.k - 1

    def indices(self, units: int) -> list[int]:
        return list(range(self.k - 1, units, self.n))

    @property
    def whole(self) -> bool:
        return self.n == 1


ALL = Shard(1, 1)


def parse_shard(text: str | None) -> Shard:
    """``--shard K/N`` (``None``: the whole run)."""
    if text is None:
        return ALL
    try:
        k_s, n_s = text.split("/")
        k, n = int(k_s), int(n_s)
    except ValueError:
        raise UserError(f"--shard must be K/N with whole numbers, e.g. 1/4 (got {text!r})") from None
    if n < 1 or not 1 <= k <= n:
        raise UserError(f"--shard {text}: need 1 <= K <= N (got K={k}, N={n})")
    return Shard(k, n)


def covered(units: int, shards: Iterable[Shard]) -> bool:
    """Whether the union of ``shards`` is every unit in ``range(units)``."""
    left = set(range(units))
    for s in shards:
        left -= set(s.indices(units))
        if not left:
            return True
    return not left
