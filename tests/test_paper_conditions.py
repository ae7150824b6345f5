"""The Appendix C/D/I conditions the audit builds (issue #19, item 3): what is built here.

Only the conditions the issue states can be built from its text; docs/readout.md ("Paper fidelity")
lists the others and why they are not.
"""

from __future__ import annotations

import pytest

from sleight.errors import UserError
from sleight.readout.audit.items import AuditItem
from sleight.readout.audit.presets import FORECAST_ITEM_INSTRUCTION, preset_items
from sleight.readout.audit.variants import PAPER_CONDITIONS, VARIANTS, Skipped, make_variant, parse_variants


def test_instruction_and_choices_deleted():
    """Paper: Appendix C/D/I, "instruction + choices deleted" (issue #19 item 3): the quoted item
    keeps its question only; both its instruction and its choice list are gone, the rest of the
    prompt is as it was, and no run of blank lines is left where they were."""
    item = preset_items("forecast", limit=1)[0]
    original = item.messages[0]["content"]
    spec = make_variant(item, "deleted_instruction_choices")
    assert not isinstance(spec, Skipped)
    text = spec.messages[0]["content"]
    assert item.choices_block in original and FORECAST_ITEM_INSTRUCTION in original
    assert item.choices_block not in text and FORECAST_ITEM_INSTRUCTION not in text
    assert item.question is not None and item.question in text and "\n\n\n" not in text
    # each deletion alone is the audit's existing variant; both together delete exactly the two parts
    only_i = make_variant(item, "deleted_instruction").messages[0]["content"]  # type: ignore[union-attr]
    only_c = make_variant(item, "deleted_choices").messages[0]["content"]  # type: ignore[union-attr]
    assert item.choices_block in only_i and FORECAST_ITEM_INSTRUCTION in only_c
    assert text == original.replace(f"{item.question}\n{item.choices_block}\n{FORECAST_ITEM_INSTRUCTION}", item.question)
    assert spec.prefill is None and spec.chat_template == item.chat_template


def test_instruction_and_choices_deleted_is_named_not_default():
    """Paper: Appendix C/D/I (issue #19 item 3): the condition is taken by name in ``--variants``;
    the default set (``all``) is unchanged, so a default audit reads and resumes as before; an item
    that lacks either part says so instead of being read half-deleted."""
    assert PAPER_CONDITIONS == ("deleted_instruction_choices",) and "deleted_instruction_choices" not in VARIANTS
    assert parse_variants("deleted_instruction_choices") == ("original", "deleted_instruction_choices")
    assert parse_variants("all") == VARIANTS
    with pytest.raises(UserError, match="unknown variant"):
        parse_variants("deleted_everything")
    bare = AuditItem(id="a", messages=({"role": "user", "content": "Q?\nA. x\nB. y"},), options=("A", "B"), choices_block="A. x\nB. y")
    skipped = make_variant(bare, "deleted_instruction_choices")
    assert isinstance(skipped, Skipped) and "quoted_instruction" in skipped.reason
    absent = AuditItem(id="b", messages=({"role": "user", "content": "Q?\nA. x\nB. y\nPick."},), options=("A", "B"),
                       choices_block="A. x\nB. y", quoted_instruction="Answer A or B.")
    assert isinstance(make_variant(absent, "deleted_instruction_choices"), Skipped)
