"""The forecast pipeline against Appendix H of the paper (issue #19, item 3): what is built here.

The paper's own text is not available here; docs/readout.md ("Paper fidelity") lists what is not built.
"""

from __future__ import annotations

import json

import pytest

from sleight.errors import UserError
from sleight.readout.audit.run import load_audit
from sleight.readout.audit.variants import make_variant


def test_user_stem_wins_over_the_preset_stem():
    """Paper: Appendix H, ``audit --preset forecast --stem`` honoured (issue #19 item 3): the
    user's stem is the one every item's stem variant reads, never silently replaced by the preset's."""
    items, config, _ = load_audit(preset="forecast", limit=2, stem="Forecast: ")
    assert config.stem == "Forecast: " and {i.stem for i in items} == {"Forecast: "}
    spec = make_variant(items[0], "stem", config.stem)
    assert spec.prefill == "Forecast: "
    items, config, _ = load_audit(preset="forecast", limit=2)
    assert {i.stem for i in items} == {config.stem} and config.stem == "Out of 100 such readers, about "


def test_user_stem_refused_when_items_carry_their_own(tmp_path):
    """Paper: Appendix H, ``--stem`` honoured or refused in one line, never silently overridden
    (issue #19 item 3): items with their own stem and a run stem are refused."""
    path = tmp_path / "items.jsonl"
    path.write_text(json.dumps({"id": "a", "prompt": "Pick.", "options": ["1", "2"], "stem": "Number: "}) + "\n")
    with pytest.raises(UserError, match=r"--stem given but 1 item\(s\) carry their own 'stem' \(first: a\)"):
        load_audit(items=path, stem="Forecast: ")
    items, config, _ = load_audit(items=path)
    assert items[0].stem == "Number: " and config.stem is None
