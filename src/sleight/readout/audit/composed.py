"""Composed interventions: App. C.1's three prompt forms times three quoted-item endings, and
App. C.2's deletion and substitution at the space-appended ending.

C.1 crosses the production prompt, the fenced item and the production prompt with the answer stem
with the item's letter instruction, its deletion and its replacement by "Summarise in one
sentence." (nine contexts per item: first-token distinctness and mass). C.2 (and App. D on Mistral
and falcon) reads the deleted and substituted instructions with one space appended to the rendered
prompt, the separator those templates omit. App. D reads the item's instruction and its six
substitutes at the original ending where the template ends in whitespace and with that space where it
does not (:func:`separator_supplied`). Each composition is one :class:`VariantSpec`, rendered by
:func:`sleight.readout.audit.variants.render` as every other variant is, and named in ``--variants``
(:data:`sleight.readout.audit.variants.COMPOSED_VARIANTS`).

:func:`variant_cell` names the (prompt form, ending) of every variant, so a table can select the
cells of a grid whatever the variant's name. The builders are defined beside
:func:`~sleight.readout.audit.variants.make_variant`, which builds every variant by name (so neither
module imports the other's), and are taken from here.
"""

from __future__ import annotations

from sleight.readout.audit.variants import (
    ENDINGS,
    FORMS,
    SEPARATOR_ENDINGS,
    SPACE_ENDINGS,
    by_name,
    composed,
    composed_grid,
    separator_supplied,
    space_appended,
)

__all__ = ["ENDINGS", "FORMS", "SEPARATOR_ENDINGS", "SPACE_ENDINGS", "by_name", "composed", "composed_grid", "separator_supplied", "space_appended", "variant_cell"]


# The (prompt form, quoted-item ending) of the plain variants (variants.py).
_PLAIN: dict[str, tuple[str, str]] = {
    "original": ("production", "instruction"),
    "space": ("space", "instruction"),
    "stem": ("stemmed", "instruction"),
    "fenced": ("fenced", "instruction"),
    "deleted_instruction": ("production", "deleted"),
    "deleted_choices": ("production", "deleted_choices"),
    "deleted_instruction_choices": ("production", "deleted_instruction_choices"),
}


def variant_cell(variant: str) -> tuple[str | None, str | None]:
    """(prompt form, quoted-item ending) of a variant name: forms ``production`` (the rendered prompt),
    ``fenced``, ``stemmed`` (C.1), ``space`` (one space appended, C.2), ``separator`` (App. D's ending);
    endings ``instruction`` (the item's own), ``deleted``, ``deleted_choices``,
    ``deleted_instruction_choices`` or a substitute's key (``summarise``, ``french``...). (None, None)
    for a name that is none of these."""
    if variant in _PLAIN:
        return _PLAIN[variant]
    if variant.startswith("substituted:"):
        return "production", variant.split(":", 1)[1]
    head, sep, rest = variant.partition("+")
    if sep and head in ("space", "separator"):
        _form, ending = variant_cell(rest if rest != "deleted" else "deleted_instruction")
        return (head, ending) if ending is not None else (None, None)
    form, times, ending = variant.partition("\u00d7")
    if times and form in FORMS and ending in ENDINGS:
        return form, ending
    return None, None
