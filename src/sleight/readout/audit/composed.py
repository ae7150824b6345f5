"""Composed interventions: App. C.1's three prompt forms times three quoted-item endings, and
App. C.2's deletion and substitution at the space-appended ending.

C.1 crosses the production prompt, the fenced item and the production prompt with the answer stem
with the item's letter instruction, its deletion and its replacement by "Summarise in one
sentence." (nine contexts per item: first-token distinctness and mass). C.2 (and App. D on Mistral
and falcon) reads the deleted and substituted instructions with one space appended to the rendered
prompt, the separator those templates omit. Each composition is one :class:`VariantSpec`, rendered
by :func:`sleight.readout.audit.variants.render` as every other variant is.
"""

from __future__ import annotations

from dataclasses import replace

from sleight.readout.audit.items import AuditItem
from sleight.readout.audit.variants import SUBSTITUTES, Skipped, VariantSpec, _replace_last, _tidy, fence, quoted_span

FORMS: tuple[str, ...] = ("production", "fenced", "stemmed")  # App. C.1
ENDINGS: tuple[str, ...] = ("instruction", "deleted", "summarise")  # App. C.1
SPACE_ENDINGS: tuple[str, ...] = ("deleted", *(f"substituted:{k}" for k in SUBSTITUTES))  # App. C.2 / D


def composed(item: AuditItem, form: str, ending: str, stem: str | None = None) -> VariantSpec | Skipped:
    """App. C.1: one prompt form (production / fenced / stemmed) with one ending of the quoted item
    (its instruction / deleted / "Summarise in one sentence."), named ``form×ending``."""
    name = f"{form}\u00d7{ending}"
    if form not in FORMS or ending not in ENDINGS:
        return Skipped(name, f"unknown composition (forms {', '.join(FORMS)}; endings {', '.join(ENDINGS)})")
    if not item.quoted_instruction:
        return Skipped(name, "item has no 'quoted_instruction'")
    msgs: tuple | None = tuple(dict(m) for m in item.messages)
    if form == "fenced":  # the fence holds the item with its own ending, then the ending is edited inside it
        span = quoted_span(item)
        msgs = _replace_last(msgs, span, fence(span)) if span and msgs else None
        if msgs is None:
            return Skipped(name, "item has no quoted span to fence")
    if ending != "instruction" and msgs is not None:
        new = "" if ending == "deleted" else SUBSTITUTES["summarise"]
        msgs = _replace_last(msgs, item.quoted_instruction, new)
        msgs = _tidy(msgs) if msgs is not None and ending == "deleted" else msgs
    if msgs is None:
        return Skipped(name, "quoted_instruction not found")
    prefill = None
    if form == "stemmed":
        prefill = item.stem or stem
        if not prefill:
            return Skipped(name, "no answer stem")
    return VariantSpec(name, msgs, prefill=prefill, chat_template=item.chat_template)


def composed_grid(item: AuditItem, stem: str | None = None) -> list[VariantSpec | Skipped]:
    """App. C.1: all nine compositions of one item, forms outer, endings inner."""
    return [composed(item, f, e, stem) for f in FORMS for e in ENDINGS]


def space_appended(item: AuditItem, ending: str) -> VariantSpec | Skipped:
    """App. C.2 / D: the quoted instruction deleted (``deleted``) or substituted
    (``substituted:<k>``) and one space appended to the rendered prompt, named ``space+<ending>``."""
    from sleight.readout.audit.variants import make_variant

    name = f"space+{ending}"
    variant = "deleted_instruction" if ending == "deleted" else ending
    if ending not in SPACE_ENDINGS:
        return Skipped(name, f"unknown ending '{ending}' (choose from {', '.join(SPACE_ENDINGS)})")
    spec = make_variant(item, variant)
    if isinstance(spec, Skipped):
        return Skipped(name, spec.reason)
    return replace(spec, variant=name, append=" ")
