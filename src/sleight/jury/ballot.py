"""What a juror fills in: named fields, each with its allowed values, and strict reading of a reply.

A :class:`Ballot` is the one description every voting path reads: the text path parses the first
JSON object that fills every field, the schema path sends :meth:`Ballot.schema` as the server's
``response_format``, and the slot path prefills :meth:`Ballot.slot_prefix` and scores
:meth:`Ballot.slot_options` at the value position. Pure: no I/O, no models.

A reply is read one of two ways (``Ballot.reading``): ``strict`` (sleight's: values read strictly,
every field required, the first object that fills them anywhere in the reply), or ``study`` (the
Sleight of Word study's ``_extract_json`` and ``_verdict_from``, ``src/awareness/judge.py`` lines
55-81 at commit 08d2bae: the text from the first ``{`` to the last ``}`` decoded as one object, a
missing label false, a present one by Python truthiness -- so ``"false"`` is true there).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, TypedDict

_TRUE = {"true", "yes"}
_FALSE = {"false", "no"}
READINGS: tuple[str, ...] = ("strict", "study")


def study_object(text: str) -> dict[str, object] | None:
    """The study's ``_extract_json``: the text from the first ``{`` to the last ``}`` decoded as one
    JSON object, or ``None`` (no braces, not JSON, or not an object)."""
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end < start:
        return None
    try:
        obj = json.loads(text[start : end + 1])
    except ValueError:
        return None
    return obj if isinstance(obj, dict) else None


def norm_key(key: str) -> str:
    """``"Switch-Aware"`` -> ``"switch_aware"``: keys are compared case- and separator-blind."""
    return re.sub(r"[\s\-]+", "_", key.strip().lower())


def as_bool(value: Any) -> bool | None:
    """A label value read strictly: JSON booleans, 0/1, or the strings true/false/yes/no.

    The string ``"false"`` is False (``bool("false")`` would say True); anything else is unreadable.
    """
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str):
        v = value.strip().lower()
        if v in _TRUE:
            return True
        if v in _FALSE:
            return False
    return None


class ObjectSchema(TypedDict):
    """A strict JSON schema of one vote object (:meth:`Ballot.schema`), sent to a server as it is."""

    type: str
    properties: dict[str, dict[str, object]]
    required: list[str]
    additionalProperties: bool


@dataclass(frozen=True)
class Field:
    """One thing a juror decides: a boolean label (``values == (True, False)``) or one class of a
    fixed set of strings."""

    name: str
    values: tuple[bool | str, ...] = (True, False)
    description: str = ""

    @property
    def boolean(self) -> bool:
        return self.values == (True, False)

    def read(self, value: object) -> bool | str | None:
        """The allowed value ``value`` spells, or ``None`` when it is not one of them."""
        if self.boolean:
            return as_bool(value)
        if isinstance(value, str):
            v = norm_key(value)
            for allowed in self.values:
                if norm_key(str(allowed)) == v:
                    return allowed
        return None

    def literal(self, value: bool | str) -> str:
        """The value as JSON text: ``true``, ``"other"``."""
        return json.dumps(value)


@dataclass(frozen=True)
class Ballot:
    """The fields of one vote, in the order the prompt lists them, plus a free-text reason."""

    fields: tuple[Field, ...]
    reason: str = "reason"
    name: str = "vote"
    extra_keys: tuple[str, ...] = field(default=("explanation",))  # accepted spellings of the reason
    reading: str = "strict"  # "strict" or "study" (module docstring)

    def with_reading(self, reading: str) -> Ballot:
        """The same ballot read the ``strict`` or the ``study`` way."""
        if reading not in READINGS:
            raise ValueError(f"reading must be one of {READINGS}, not {reading!r}")
        return replace(self, reading=reading)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.fields)

    def skeleton(self) -> str:
        """The answer's shape with placeholders, not example values: a weak judge that copies an
        example would cast a silent vote; one that copies placeholders writes invalid JSON."""
        parts = []
        for f in self.fields:
            allowed = "|".join(f.literal(v) if not f.boolean else str(v).lower() for v in f.values)
            parts.append(f'"{f.name}": <{allowed}>')
        parts.append(f'"{self.reason}": "<why>"')
        return "{" + ", ".join(parts) + "}"

    def nudge(self) -> str:
        """The retry's user turn after an unparsable reply."""
        return (
            f"That was not one valid JSON object with every field filled in as asked. Answer again with "
            f"the JSON object only: {self.skeleton()}"
        )

    def schema(self, reason_max_chars: int | None = None) -> ObjectSchema:
        """A strict JSON schema of the vote (every field required, in the prompt's order, nothing
        else allowed); ``reason_max_chars`` bounds the reason so a token budget cannot cut it off."""
        props: dict[str, dict[str, object]] = {}
        for f in self.fields:
            props[f.name] = {"type": "boolean"} if f.boolean else {"type": "string", "enum": list(f.values)}
        props[self.reason] = {"type": "string"} if reason_max_chars is None else {"type": "string", "maxLength": reason_max_chars}
        return {"type": "object", "properties": props, "required": [*self.names, self.reason], "additionalProperties": False}

    def read_object(self, obj: Mapping[str, Any]) -> dict[str, bool | str] | None:
        """Field values (and ``reason``) of one decoded JSON object, or ``None`` if any is unreadable."""
        keys = {norm_key(str(k)): v for k, v in obj.items()}
        out: dict[str, bool | str] = {}
        for f in self.fields:
            if f.name not in keys:
                return None
            value = f.read(keys[f.name])
            if value is None:
                return None
            out[f.name] = value
        reason = keys.get(self.reason)
        for k in self.extra_keys:
            reason = keys.get(k) if reason is None else reason
        out[self.reason] = reason if isinstance(reason, str) else ("" if reason is None else json.dumps(reason))
        return out

    def read_study_object(self, obj: Mapping[str, Any]) -> dict[str, bool | str] | None:
        """Field values (and ``reason``) the study's way: exact keys, a missing label false, a present
        one by truthiness (``bool(obj.get(name, False))``); a class field is read as :meth:`Field.read`."""
        out: dict[str, bool | str] = {}
        for f in self.fields:
            if f.boolean:
                out[f.name] = bool(obj.get(f.name, False))
            else:
                value = f.read(obj.get(f.name))
                if value is None:
                    return None
                out[f.name] = value
        out[self.reason] = str(obj.get(self.reason, "")).strip()
        return out

    def parse(self, text: str | None) -> dict[str, bool | str] | None:
        """The vote in ``text`` read this ballot's way (:attr:`reading`), else ``None``: each field's
        value (a label's bool, a class's string) by the field's name, and the reason string.

        Strict reading: the first JSON object in ``text`` that fills every field readably.

        Code fences and prose around the object are tolerated (every ``{`` is tried as the start of a
        JSON value, nested objects included); the JSON itself is not repaired, so a truncated or
        malformed object is ``None``. Study reading: :func:`study_object`, then
        :meth:`read_study_object`.
        """
        text = text or ""
        if self.reading == "study":
            obj = study_object(text)
            return None if obj is None else self.read_study_object(obj)
        decoder = json.JSONDecoder()
        for match in re.finditer(r"\{", text):
            try:
                obj, _ = decoder.raw_decode(text, match.start())
            except ValueError:
                continue
            if isinstance(obj, dict):
                vote = self.read_object(obj)
                if vote is not None:
                    return vote
        return None

    # -- label slots ---------------------------------------------------------------------------
    def slot_prefix(self, f: Field) -> str:
        """The assistant prefill that ends just before ``f``'s value: ``{"flagged":`` (the options
        carry their own leading space), or ``{"class": "`` for a class field."""
        return f'{{"{f.name}":' if f.boolean else f'{{"{f.name}": "'

    def slot_options(self, f: Field) -> tuple[str, ...]:
        """The continuations scored at ``f``'s slot, aligned with ``f.values``."""
        return (" true", " false") if f.boolean else tuple(str(v) for v in f.values)
