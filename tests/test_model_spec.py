"""One typed ``ModelSpec`` from the command line to the engine: the flags build it once, it is checked
once (one line naming a bad setting), the tamper job carries it, and ``vllm_settings`` gives vLLM
what the study's ``run_model`` gave it (Sleight-of-Word 08d2bae, ``src/awareness/runner.py``). The
real engine receiving it is in tests/test_vllm.py (the module's engine is built from a spec)."""

from __future__ import annotations

import pickle

import pytest

from sleight.backends.spec import ModelSpec, vllm_settings
from sleight.cli.common import model_spec_from_args
from sleight.cli.main import build_parser
from sleight.cli.tamper_run import job_from_args
from sleight.errors import UserError
from sleight.tamper.job import check_scorer


def _args(*argv: str):
    return build_parser().parse_args(["tamper", "run", *argv])


def test_the_flags_build_one_spec_with_the_studys_settings():
    spec = model_spec_from_args(_args(
        "--model", "Qwen/Qwen3.6-27B", "--engine", "vllm", "--dtype", "auto", "--quantization", "bitsandbytes",
        "--max-model-len", "4096", "--gpu-memory-utilization", "0.9", "--enforce-eager", "--thinking", "off",
        "--limit-mm-per-prompt", '{"image": 0}', "--engine-args", '{"max_num_seqs": 64}', "--revision", "abc",
    ))  # fmt: skip
    assert spec == ModelSpec(
        "Qwen/Qwen3.6-27B", engine="vllm", dtype="auto", quantization="bitsandbytes", max_model_len=4096,
        gpu_memory_utilization=0.9, enforce_eager=True, chat_template_kwargs={"enable_thinking": False},
        limit_mm_per_prompt={"image": 0}, engine_args={"max_num_seqs": 64}, revision="abc",
    )  # fmt: skip
    # runner.run_model: bitsandbytes quantization loads with load_format bitsandbytes
    assert vllm_settings(spec) == {
        "revision": "abc", "quantization": "bitsandbytes", "load_format": "bitsandbytes", "limit_mm_per_prompt": {"image": 0}, "max_num_seqs": 64,
    }  # fmt: skip
    job = job_from_args(_args("--model", "m", "--questions", "2", "--shard", "1/2", "--no-progress"))
    assert (job.model, job.trials.questions, job.shard, job.progress) == (ModelSpec("m", dtype="float32"), 2, "1/2", False)
    assert pickle.loads(pickle.dumps(job)) == job


@pytest.mark.parametrize(
    ("argv", "match"),
    [
        (["--quantization", "awq"], "engine 'hf' takes no quantization \\(vllm settings; use --engine vllm\\)"),
        (["--engine", "vllm", "--gpu-memory-utilization", "1.5"], "gpu_memory_utilization must be in \\(0, 1\\]"),
        (["--engine", "vllm", "--engine-args", "[1]"], "--engine-args must be a JSON object"),
        (["--engine", "vllm", "--limit-mm-per-prompt", '{"image": -1}'], "limit_mm_per_prompt takes a count per modality"),
        (["--engine", "vllm", "--engine-args", '{"quantization": "awq"}'], "engine_args sets quantization"),
        (["--scorer", "twin"], "--scorer twin is a vllm setting"),
        (["--threads", "0"], "--threads must be at least 1"),
    ],
)
def test_a_bad_setting_is_one_line(argv, match):
    with pytest.raises(UserError, match=match) as err:
        model_spec_from_args(_args(*argv))
    assert "\n" not in str(err.value)


def test_the_full_vocabulary_entropy_asks_for_the_twin_by_name():
    """--conventions sleight records the exact entropy, which vLLM does not return: refused without
    --scorer twin, never a twin loaded silently; the study's conventions need none."""
    with pytest.raises(UserError, match="add --scorer twin"):
        check_scorer(ModelSpec("m", engine="vllm"), "sleight")
    check_scorer(ModelSpec("m", engine="vllm", scorer="twin"), "sleight")
    check_scorer(ModelSpec("m", engine="vllm"), "study")
    check_scorer(ModelSpec("m"), "sleight")
