"""The weights' dtype a table pins (issue #34 item 2): the paper ran Tables 3 and 14, App. H and App. I
in float16 and App. E in bfloat16; ``reproduce`` loads each checkpoint in the table's dtype unless
``--dtype`` says otherwise, records it, and its plan sizes memory in that dtype."""

from __future__ import annotations

from dataclasses import replace

import pytest

from sleight.cli.common import model_spec_from_args
from sleight.cli.main import build_parser
from sleight.errors import UserError
from sleight.readout.reproduce import ModelCache, load_table
from sleight.readout.reproduce.plan import dry_run_lines, memory, memory_gib, plan
from sleight.readout.reproduce.spec import Checkpoint
from tolerances import FLOAT64_RTOL

CK = Checkpoint("qwen3-32b", "Qwen/Qwen3-32B", params_b=32.8)


def _base(*argv: str):
    return model_spec_from_args(build_parser().parse_args(["readout", "reproduce", "table3", *argv]), model=CK.model, resolve_dtype=False)


def test_the_pinned_dtype_reaches_the_loaded_weights():
    """A table's float16 loads the bundled model's weights in float16 (the end-to-end table tests run
    float32 through the command's dtype, tests/test_reproduce.py)."""
    import torch

    cache = ModelCache()
    try:
        m = cache.get(Checkpoint("smollm2-135m-instruct", "smollm2-135m-instruct"), "float16")
        assert m.info.dtype == "float16" and next(m.model.parameters()).dtype == torch.float16
    finally:
        cache.close()


def test_a_checkpoint_loads_in_the_tables_dtype_unless_the_command_gives_one():
    assert ModelCache(_base()).spec(CK, "float16").dtype == "float16"
    assert ModelCache(_base()).spec(CK, None).dtype == "float32"  # no pin: the hf engine's default
    assert ModelCache(_base("--dtype", "bfloat16")).spec(CK, "float16").dtype == "bfloat16"


def test_the_plan_sizes_memory_in_the_pinned_dtype():
    """Qwen3-32B: its weights and KV cache in float16, twice those in float32 (the unpinned hf
    default) -- the plan once printed float16's memory while the run loaded float32."""
    config = replace(load_table("table3"), checkpoints=(CK,), dtype="float16")
    spec = next(iter(config.runs.values()))
    half, full = memory(CK, "float16", spec), memory(CK, "float32", spec)
    assert half is not None and full is not None
    assert [r.memory_gib for r in plan(config, [CK])][0] == pytest.approx(half.total_gib, rel=FLOAT64_RTOL)
    assert full.weights_gib == pytest.approx(2 * half.weights_gib, rel=FLOAT64_RTOL)
    assert full.kv_gib == pytest.approx(2 * half.kv_gib, rel=FLOAT64_RTOL)
    lines = dry_run_lines(config, [CK])
    assert "weights in float16" in lines[0] and f"{memory_gib(CK, 'float16', spec):.0f} GiB" in "\n".join(lines)
    lines = dry_run_lines(config, [CK], dtype="float32")
    assert "weights in float32" in lines[0] and f"{memory_gib(CK, 'float32', spec):.0f} GiB" in "\n".join(lines)


def test_a_config_dtype_outside_the_engines_is_one_line(tmp_path):
    src = load_table("table3").path.read_text(encoding="utf-8")
    bad = tmp_path / "t.yaml"
    bad.write_text(src + "\ndtype: float8\n", encoding="utf-8")
    with pytest.raises(UserError, match="dtype: expected one of"):
        load_table(bad)


# The dtype each item was run in, as the paper says it: float16 forward passes in Table 3's caption
# (§5), App. H's reader and every reading of App. I; bfloat16 for App. E's library loaders.
PINNED = {
    "table3": "float16", "table4": "float16", "appendix-h": "float16", "table12": "float16", "table13": "float16",
    "table14": "float16", "table15": "float16", "table16": "float16",
    "appendix-e": "bfloat16", "appendix-e-estimators": "bfloat16", "table9": "bfloat16", "table10": "bfloat16",
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(PINNED))
def test_each_items_dtype_is_the_papers(name):
    assert load_table(name).dtype == PINNED[name]


def test_the_dry_run_prints_the_pinned_dtypes_memory(capsys):
    """``reproduce table3 --dry-run`` on the paper's checkpoints: memory in float16, as pinned."""
    from sleight.cli.main import main

    assert main(["readout", "reproduce", "table3", "--dry-run"]) == 0
    out = capsys.readouterr().out
    config = load_table("table3")
    assert "weights in float16" in out
    for r in plan(config, config.checkpoints):
        assert r.memory_gib is not None and f"memory {r.memory_gib:>4.0f} GiB" in out
