"""The study's own judge prompt, run from the user's copy of it (``tamper judge --prompt-file FILE``).

The file is YAML with two keys, ``system`` (optional) and ``user``, each a Python format template
(``{{`` and ``}}`` are literal braces), so the study's system prompt and user template paste in
unchanged. Its placeholders are the study's -- ``{query}`` (the question), ``{trigger}``,
``{replacement}`` (the substitute), ``{reaction}`` (the altered reply) -- plus ``{answers}`` (the
accepted answers, ``; ``-joined; empty for a question that is not shipped), which the study did not
have. ``{reaction}`` is required: a judge that never sees the reply cannot label it.

The file may also be the study's own source file, unchanged: ``src/awareness/judge.py`` of
fractalego/Sleight-of-Word (``.py``), from which the two string constants ``SYSTEM`` and
``USER_TEMPLATE`` are read by parsing the file (never importing or running it) -- the one command
that fetches it is in docs/jury.md. Both forms give the same templates, so the same votes.

The study's judge prompt is pinned: :data:`STUDY_JUDGE_SHA256` is the sha256 of that file's bytes
at commit 08d2bae (:data:`STUDY_JUDGE_URL`). Under the study's conventions a prompt file must be
exactly that file (:func:`require_study_judge`; anything else, a YAML copy of its templates or an
edited copy included, is refused in one line naming the file and the expected hash); any other file
runs under ``--conventions sleight``, where ``jury.json`` records it as a variant
(``prompt_source``), with both its hashes.

The reply fields are the study's too: ``flagged``, ``corrected``, ``derailed``, ``aware`` (stored as
``switch_aware``), ``confidence``, ``rationale`` (stored as the reason). A reply is read as the
study reads it (Sleight-of-Word ``src/awareness/judge.py``, ``_extract_json`` and ``_verdict_from``,
lines 55-81 at commit 08d2bae): a label that is missing (or ``null``) is false; ``confidence``, when
given, must be a number in [0, 1]; a reply with no readable JSON object is "unknown". Under the
study's conventions (the default; :mod:`sleight.jury.rules`) that is all: the object is the text from
the first ``{`` to the last ``}``, a label's value is read by truthiness (the study's
``bool("false")`` is true), and an unknown reply counts as false in the majority. Under
``--conventions sleight`` a label's value is read strictly (``"false"`` is false; any value that is
not a boolean makes the reply unknown), the JSON object may sit anywhere in the reply, and an unknown
reply is asked once more, then recorded as an abstention.

Pure apart from reading the file.
"""

from __future__ import annotations

import hashlib
import json
import math
import string
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from sleight.errors import UserError, parse_yaml
from sleight.jury.ballot import Ballot, Field, ObjectSchema, norm_key
from sleight.tamper.jury.prompt import Case, JudgePrompt

# The study's judge module at the commit the paper's code names: its bytes' sha256, computed from
# the file itself (src/awareness/judge.py of fractalego/Sleight-of-Word at 08d2bae, 4932 characters).
STUDY_REPO = "fractalego/Sleight-of-Word"
STUDY_COMMIT = "08d2bae725db2be81a4a621f8f9463ee7819ec4b"
STUDY_JUDGE_PATH = "src/awareness/judge.py"
STUDY_JUDGE_SHA256 = "dafe94f73805147f720ddd143446376197fec71ec08a27edc75da60bfd502c98"
STUDY_JUDGE_URL = f"https://raw.githubusercontent.com/{STUDY_REPO}/{STUDY_COMMIT}/{STUDY_JUDGE_PATH}"

PLACEHOLDERS: tuple[str, ...] = ("query", "trigger", "replacement", "reaction")  # the study's
EXTRA_PLACEHOLDERS: tuple[str, ...] = ("answers",)
REQUIRED_PLACEHOLDER = "reaction"
KEYS: tuple[str, ...] = ("system", "user")

# The study's reply fields, in its prompt's order, and the stored label each one fills.
STUDY_LABELS: dict[str, str] = {"flagged": "flagged", "corrected": "corrected", "derailed": "derailed", "switch_aware": "aware"}
CONFIDENCE = "confidence"
RATIONALE = "rationale"
RATIONALE_MAX_CHARS = 500  # the study keeps the first 500 characters


@dataclass(frozen=True)
class StudyBallot(Ballot):
    """The study's reply: four boolean labels, a confidence and a rationale, read the study's way."""

    def read_object(self, obj: Mapping[str, Any]) -> dict[str, bool | str] | None:
        """A missing or null label is false; a present one must be a boolean; a confidence, if
        given, a number in [0, 1]; anything else makes the reply unknown (``None``)."""
        keys = {norm_key(str(k)): v for k, v in obj.items()}
        out: dict[str, bool | str] = {}
        for f in self.fields:
            raw = keys.get(f.name)
            value = False if raw is None else f.read(raw)
            if value is None:
                return None
            out[f.name] = value
        if CONFIDENCE in keys and _confidence(keys[CONFIDENCE]) is None:
            return None
        rationale = keys.get(self.reason)
        out[self.reason] = ("" if rationale is None else str(rationale)).strip()[:RATIONALE_MAX_CHARS]
        return out

    def read_study_object(self, obj: Mapping[str, Any]) -> dict[str, bool | str] | None:
        """The study's own reading (:meth:`Ballot.read_study_object`) plus its record's checks: a
        confidence that is not a number in [0, 1] makes the reply unknown; the rationale is cut."""
        out = super().read_study_object(obj)
        if out is None or _confidence(obj.get(CONFIDENCE, 0.5)) is None:
            return None
        out[self.reason] = str(out[self.reason])[:RATIONALE_MAX_CHARS]  # the reason is a string
        return out

    def skeleton(self) -> str:
        labels = ", ".join(f'"{f.name}": <true|false>' for f in self.fields)
        return "{" + labels + f', "{CONFIDENCE}": <0.0-1.0>, "{self.reason}": "<one sentence>"' + "}"

    def schema(self, reason_max_chars: int | None = None) -> ObjectSchema:
        """The study's reply as a strict JSON schema: the labels, the confidence, the rationale."""
        schema = super().schema(reason_max_chars)
        props = {f.name: schema["properties"][f.name] for f in self.fields}
        props[CONFIDENCE] = {"type": "number", "minimum": 0, "maximum": 1}
        props[self.reason] = schema["properties"][self.reason]
        return {"type": schema["type"], "properties": props, "required": list(props), "additionalProperties": schema["additionalProperties"]}


def _confidence(value: Any) -> float | None:
    """The study's ``float(confidence)`` checked against its [0, 1] bound, or ``None``."""
    if value is None:  # the study's float(None) fails
        return None
    try:
        c = float(value)
    except (TypeError, ValueError):
        return None
    return c if not math.isnan(c) and 0.0 <= c <= 1.0 else None


STUDY_BALLOT = StudyBallot(
    tuple(Field(name) for name in STUDY_LABELS.values()), reason=RATIONALE, name="study_verdict", extra_keys=()
)


@dataclass(frozen=True)
class PromptFile:
    """A checked prompt file: its templates, the templates' hash that names its votes, and the
    hash of the file's bytes that says whether it is the study's judge module."""

    path: Path
    system: str | None
    user: str
    sha256: str
    file_sha256: str = ""

    @property
    def is_study(self) -> bool:
        """The file is the study's ``src/awareness/judge.py`` at 08d2bae, byte for byte."""
        return self.file_sha256 == STUDY_JUDGE_SHA256

    @property
    def variant(self) -> str:
        """The votes' ``prompt_variant``: the file's content, not its name, so a renamed copy resumes
        and an edited one is asked again."""
        return f"file:{self.sha256[:12]}"

    def render(self, case: Case) -> list[dict[str, str]]:
        values = {
            "query": case.question,
            "trigger": case.trigger,
            "replacement": case.substitute,
            "reaction": case.reply,
            "answers": "; ".join(case.answers),
        }
        msgs = [] if self.system is None else [{"role": "system", "content": self.system.format(**values)}]
        return msgs + [{"role": "user", "content": self.user.format(**values)}]

    def prompt(self) -> JudgePrompt:
        return JudgePrompt(
            self.variant,
            self.render,
            ballot=STUDY_BALLOT,
            fields=dict(STUDY_LABELS),
            meta={
                "prompt_file": str(self.path),
                "prompt_file_sha256": self.sha256,
                "prompt_file_bytes_sha256": self.file_sha256,
                "prompt_source": f"study:{STUDY_REPO}@{STUDY_COMMIT[:7]}/{STUDY_JUDGE_PATH}" if self.is_study else "variant",
            },
        )


def require_study_judge(pf: PromptFile) -> PromptFile:
    """``pf`` when it is the study's pinned judge module; otherwise one line naming the file, its
    hash and the one expected (the study's conventions take that prompt and no other)."""
    if pf.is_study:
        return pf
    raise UserError(
        f"--prompt-file {pf.path} is not the study's judge prompt (sha256 {pf.file_sha256}): under the study's conventions "
        f"it must be {STUDY_JUDGE_PATH} of {STUDY_REPO} at {STUDY_COMMIT[:7]}, unchanged (sha256 {STUDY_JUDGE_SHA256}; "
        f"{STUDY_JUDGE_URL}); run another prompt with --conventions sleight"
    )


def checked_for(pf: PromptFile, conventions: str | None) -> PromptFile:
    """``pf`` as the jury's ``conventions`` take it: under the study's, only the pinned judge module
    (:func:`require_study_judge`); under sleight's, any checked file (a variant). The one check both
    ``tamper judge`` and a sweep's plan make (``None``: the conventions are not known yet)."""
    return require_study_judge(pf) if conventions == "study" else pf


def _placeholders(template: str, where: str) -> set[str]:
    """The placeholders of one template; anything but a plain known name is refused in one line."""
    allowed = (*PLACEHOLDERS, *EXTRA_PLACEHOLDERS)
    found: set[str] = set()
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as exc:
        raise UserError(f"{where}: not a format template ({exc}); write literal braces as {{{{ and }}}}") from None
    for _, name, spec, conversion in parsed:
        if name is None:
            continue
        if name not in allowed or spec or conversion:
            shown = "{" + name + (f"!{conversion}" if conversion else "") + (f":{spec}" if spec else "") + "}"
            raise UserError(
                f"{where}: unknown placeholder {shown} (the study's are {', '.join('{' + p + '}' for p in PLACEHOLDERS)}, "
                "and {answers}; write literal braces as {{ and }})"
            )
        found.add(name)
    return found


# The study's judge module names its templates so (src/awareness/judge.py lines 19 and 28 at 08d2bae).
PY_NAMES: dict[str, str] = {"SYSTEM": "system", "USER_TEMPLATE": "user"}


def templates_from_python(text: str, path: Path) -> dict[str, str]:
    """``SYSTEM`` and ``USER_TEMPLATE`` of the study's judge module, read from its syntax tree (the
    file is parsed, never imported or run); each must be a plain string literal at module level."""
    import ast

    try:
        tree = ast.parse(text, filename=str(path))
    except SyntaxError as exc:
        raise UserError(f"--prompt-file {path} is not Python ({exc.msg}, line {exc.lineno})") from None
    found: dict[str, str] = {}
    for node in tree.body:
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)):
            continue
        name = node.targets[0].id
        if name in PY_NAMES:
            if not (isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)):
                raise UserError(f"--prompt-file {path}: {name} (line {node.lineno}) is not a plain string")
            found[PY_NAMES[name]] = node.value.value
    if "user" not in found:
        raise UserError(f"--prompt-file {path}: no USER_TEMPLATE string (the study's src/awareness/judge.py defines one)")
    return found


def parse_prompt_file(text: str, path: Path, file_sha256: str = "") -> PromptFile:
    """A prompt file's text checked (pure): the study's judge module (``.py``), or YAML with
    ``user`` and optionally ``system``. ``file_sha256``: the hash of the file's bytes."""
    if Path(path).suffix == ".py":
        return replace(_checked(templates_from_python(text, path), path), file_sha256=file_sha256)
    data = parse_yaml(text, f"--prompt-file {path}")
    if not isinstance(data, dict):
        raise UserError(f"--prompt-file {path}: expected a mapping with 'system' and 'user' templates")
    unknown = sorted(set(map(str, data)) - set(KEYS))
    if unknown:
        raise UserError(f"--prompt-file {path}: unknown key(s) {', '.join(unknown)} (give 'system' and 'user')")
    for key in KEYS:
        if key in data and data[key] is not None and not isinstance(data[key], str):
            raise UserError(f"--prompt-file {path}: '{key}' must be text")
    return replace(_checked(data, path), file_sha256=file_sha256)


def _checked(data: Mapping[str, Any], path: Path) -> PromptFile:
    """The templates checked (placeholders known, ``{reaction}`` present) and hashed."""
    user, system = data.get("user"), data.get("system")
    if not user or not str(user).strip():
        raise UserError(f"--prompt-file {path}: no 'user' template")
    used = _placeholders(user, f"--prompt-file {path} (user)")
    if system is not None:
        used |= _placeholders(system, f"--prompt-file {path} (system)")
    if REQUIRED_PLACEHOLDER not in used:
        raise UserError(f"--prompt-file {path}: no {{{REQUIRED_PLACEHOLDER}}} placeholder, so the judge would never see the reply")
    digest = hashlib.sha256(json.dumps({"system": system, "user": user}, sort_keys=True).encode("utf-8")).hexdigest()
    return PromptFile(path, system, user, digest)


def load_prompt_file(path: Path | str) -> PromptFile:
    """Read and check a prompt file; one line for a file that is missing or not usable."""
    p = Path(path)
    if not p.is_file():
        raise UserError(f"--prompt-file {p} does not exist")
    try:
        raw = p.read_bytes()
        text = raw.decode("utf-8").replace("\r\n", "\n").replace("\r", "\n")  # as read_text reads it
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"--prompt-file {p} cannot be read as UTF-8 text ({exc})") from None
    return parse_prompt_file(text, p, hashlib.sha256(raw).hexdigest())
