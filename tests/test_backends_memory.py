"""The dry runs' memory per model (issue #34 item 10: "the dry run's memory per subject counts weights
by tensor plus KV and activations"): :mod:`sleight.backends.memory`'s arithmetic by hand on a small
written-out config, on the bundled model's own config.json, and on the shipped architectures the
study's and the paper's checkpoints are planned with; both plans print the three terms."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sleight.backends import memory as mem
from sleight.backends.architectures import architecture, shipped_ids

# Four layers (sliding, full, sliding, full), 4 heads of 16, 2 KV heads, MLP 128, vocabulary 1000, untied.
CFG: dict[str, object] = {
    "model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 4, "num_attention_heads": 4,
    "num_key_value_heads": 2, "vocab_size": 1000, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    "layer_types": ["sliding_attention", "full_attention"] * 2, "sliding_window": 32,
}  # fmt: skip
# per layer: q 64x64 + k, v 2 x 32x64 + o 64x64 + gate, up 2 x 128x64 + down 64x128 + 2 norms of 64
LAYER = 4096 + 4096 + 4096 + 16384 + 8192 + 128
PARAMS = 1000 * 64 * 2 + 64 + 4 * LAYER  # embeddings, lm_head, final norm, layers
SIXTEEN_BIT = (1000 * 64 * 2 + 64) * 2 + 4 * 128 * 2  # what every method leaves in bfloat16
SMALL = mem.Profile(batched_tokens=16, seqs=4, block_size=8, in_flight=2)


def test_weights_by_tensor_under_each_method():
    assert sum(t.params for t in mem.tensors(CFG)) == PARAMS == 276_032
    assert mem.weights_bytes(CFG, None, None) == 2 * PARAMS  # the checkpoint's bfloat16
    assert mem.weights_bytes(CFG, None, "float32") == 4 * PARAMS
    # AWQ, 4 bits in groups of 32: codes, then a float16 scale and a packed 4-bit zero per group of each output
    awq = {**CFG, "quantization_config": {"quant_method": "awq", "bits": 4, "group_size": 32}}
    q, kv, o, gate_up, down = (4096 / 2 + 2 * 64 * 2.5), 2 * (2048 / 2 + 2 * 32 * 2.5), (4096 / 2 + 2 * 64 * 2.5), 2 * (8192 / 2 + 2 * 128 * 2.5), 8192 / 2 + 4 * 64 * 2.5
    assert mem.weights_bytes(awq, None, None) == mem.weights_bytes(awq, "awq_marlin", None) == SIXTEEN_BIT + 4 * (q + kv + o + gate_up + down) == 342_400
    # bitsandbytes in flight: NF4 and one float32 absmax per 64 weights; embeddings and lm_head stay 16-bit
    bnb = 3 * (4096 / 2 + 64 * 4) + 2 * (8192 / 2 + 128 * 4) + (8192 / 2 + 128 * 4)
    assert mem.weights_bytes(CFG, "bitsandbytes", None) == SIXTEEN_BIT + 4 * bnb == 340_096
    # fp8: a byte a weight and one float32 scale a tensor
    fp8 = (4096 + 4) + 2 * (2048 + 4) + (4096 + 4) + 2 * (8192 + 4) + (8192 + 4)
    assert mem.weights_bytes(CFG, "fp8", None) == SIXTEEN_BIT + 4 * fp8 == 404_720


def test_kv_for_one_request_at_max_model_len_caps_the_sliding_layers():
    page = 8 * 2 * 2 * 16 * 2  # 8 tokens x K,V x 2 heads x 16 x bfloat16
    full = -(-100 // 8) * page  # cdiv(100, 8) pages
    sliding = (-(-min(32 - 1 + 2 * 16, 100) // 8) + 1) * page  # the window plus two batches in flight, one page of slack
    assert mem.kv_bytes(CFG, None, 100, SMALL) == 2 * full + 2 * sliding == 45_056
    assert mem.kv_bytes(CFG, None, 100, SMALL, sequences=3) == 3 * 45_056
    assert mem.kv_bytes(CFG, None, 20, SMALL) == (2 * 3 + 2 * (3 + 1)) * page  # shorter than the window: every layer holds the request
    assert mem.kv_bytes_per_token(CFG, None) == 4 * 2 * 2 * 16 * 2 == 512


def test_activations_of_the_profiling_run():
    # per token: residual, hidden, normed (3 x 64) and the widest layer's MLP (gate, up, activated: 3 x 128), bfloat16;
    # the sampler on min(4 rows, 16 tokens): logits in bfloat16 plus 12 bytes of float32 copies each
    forward = 16 * (3 * 64 + 3 * 128) * 2
    sampler = 4 * 1000 * (2 + 12)
    assert mem.activation_bytes(CFG, None, None, SMALL) == forward + sampler == 74_432
    # bitsandbytes dequantizes one whole weight (the widest, 128 x 64) for a prefill
    assert mem.activation_bytes(CFG, "bitsandbytes", None, SMALL) == forward + sampler + 128 * 64 * 2
    total = mem.memory(CFG, None, None, 100, SMALL)
    assert (total.weights_gib, total.kv_gib, total.activation_gib) == (2 * PARAMS / 2**30, 45_056 / 2**30, 74_432 / 2**30)


def test_vllms_profile_defaults_by_gpu():
    """engine/arg_utils.py get_batch_defaults (LLM class): 16384 tokens / 1024 rows from 70 GiB (not an A100), else 8192 / 256."""
    assert mem.vllm_profile("RTX A6000", 48) == mem.Profile(8192, 256, 16)
    assert mem.vllm_profile("H100 SXM", 80) == mem.Profile(16384, 1024, 16)
    assert mem.vllm_profile("A100 80GB", 80) == mem.Profile(8192, 256, 16)
    assert mem.vllm_profile("H100", 80, {"max_num_batched_tokens": 2048, "block_size": 32}) == mem.Profile(2048, 1024, 32)


def test_the_bundled_models_own_config():
    """SmolLM2-135M (30 layers of 576, 9 heads, 3 KV heads of 64, MLP 1536, tied 49152 x 576) from its
    converted folder's config.json: 134,515,008 parameters, the float32 safetensors' 538,060,032 bytes."""
    from sleight.backends.resolve import resolve

    folder = Path(resolve("smollm2-135m-instruct").load_path)
    arch = architecture(str(folder))
    assert arch is not None and arch.source == str(folder / "config.json")
    layer = 576 * 576 * 2 + 2 * 192 * 576 + 3 * 576 * 1536 + 2 * 576
    assert sum(t.params for t in mem.tensors(arch.config)) == 49152 * 576 + 576 + 30 * layer == 134_515_008
    assert mem.weights_bytes(arch.config, None, "float32") == 538_060_032
    header = json.loads((folder / "model.safetensors").read_bytes()[8 : 8 + int.from_bytes((folder / "model.safetensors").read_bytes()[:8], "little")])
    assert sum(v["data_offsets"][1] - v["data_offsets"][0] for k, v in header.items() if k != "__metadata__") == 538_060_032
    assert mem.kv_bytes_per_token(arch.config, "float32") == 30 * 2 * 3 * 64 * 4 == 46_080  # vllm.py's DEFAULT_KV_CACHE_GIB note: 45 KiB a token
    shipped = architecture("smollm2-135m-instruct")
    assert shipped is not None and sum(t.params for t in mem.tensors(shipped.config)) == 134_515_008


def test_gemma4_small_models_per_layer_embeddings_and_shared_kv():
    """E2B: a 262144 x (35 x 256) per-layer embedding table that no method quantizes; its last 20 layers
    read earlier layers' KV (no K/V projections, no cache) and run an MLP twice as wide."""
    arch = architecture("google/gemma-4-E2B-it")
    assert arch is not None
    ts = {t.name: t for t in mem.tensors(arch.config)}
    ple = ts["embed_tokens_per_layer"]
    assert ple.params == 262144 * 35 * 256 and mem.tensor_bytes(ple, mem.quant_of(arch.config, "bitsandbytes"), 2) == ple.params * 2
    assert "layers.14.self_attn.k_proj" in ts and "layers.15.self_attn.k_proj" not in ts
    assert ts["layers.15.mlp.gate_up_proj"].rows == 2 * ts["layers.14.mlp.gate_up_proj"].rows == 2 * 6144
    # the 15 layers with a cache: sliding ones (1 KV head of 256) hold all 4096 tokens, as 511 + two batches of 8192
    # exceed it, plus one page; global ones (layers 4, 9, 14: 1 KV head of 512) hold 4096
    a6000 = mem.vllm_profile("RTX A6000", 48)
    sliding, full = (4096 // 16 + 1) * 16 * 2 * 256 * 2, 4096 // 16 * 16 * 2 * 512 * 2
    assert mem.kv_bytes(arch.config, "auto", 4096, a6000) == 12 * sliding + 3 * full == 75_694_080
    assert arch.encoder_params() == 168_544_256 + 307_183_904 and arch.encoder_params({"audio": 0}) == 168_544_256
    assert arch.encoder_params({"image": 0}) == 168_544_256 + 307_183_904  # the vision tower serves video too


def test_gemma4_12b_counts_its_safetensors_header():
    """Gemma 4 12B's header: 11,959,730,224 parameters, 52,379,904 of them the image/audio embedders;
    the text model's 11,907,350,320 plus the V slot vLLM gives each of its 8 K = V global layers."""
    arch = architecture("google/gemma-4-12B-it")
    assert arch is not None
    text = sum(t.params for t in mem.tensors(arch.config))
    assert text - 8 * 512 * 3840 == 11_907_350_320 and text - 8 * 512 * 3840 + arch.encoder_params() == 11_959_730_224


def test_gpt2_counts_its_published_parameters():
    """App. C.6's GPT-2 (its tokenizer is what the table reads; the plan counts its shapes): 124,439,808
    parameters, the output layer tied to the token embeddings, each linear layer with a bias; its KV
    is 12 layers x 2 x 768 a token."""
    arch = architecture("openai-community/gpt2")
    assert arch is not None
    layer = 768 * 2304 + 2304 + 768 * 768 + 768 + 768 * 3072 + 3072 + 3072 * 768 + 768 + 4 * 768
    assert sum(t.params for t in mem.tensors(arch.config)) == 50257 * 768 + 1024 * 768 + 2 * 768 + 12 * layer == 124_439_808
    assert mem.kv_bytes_per_token(arch.config, "float32") == 12 * 2 * 768 * 4


def test_every_study_and_paper_checkpoint_has_shapes():
    from sleight.readout.reproduce import load_table, shipped_tables
    from sleight.tamper.sweep.config import load_config

    cfg = load_config("study")
    models = {m.model for m in cfg.subjects} | {j.model for j in (cfg.jury.judges if cfg.jury else ())}
    models |= {ck.model for t in shipped_tables() for ck in load_table(t).checkpoints}
    assert {m.lower() for m in models} <= set(shipped_ids())


def test_the_sweep_plan_prints_the_three_terms_and_bitsandbytes_keeps_16_bit_layers():
    from sleight.tamper.sweep import memory as sweep_memory
    from sleight.tamper.sweep.config import load_config

    cfg = load_config("study")
    by = {m.name: m for m in cfg.subjects}
    m = by["gemma4-e2b"]
    est = sweep_memory.estimate(m, m.spec, 256, 100, 101, 1, cfg.gpu)
    arch = architecture(m.model)
    assert arch is not None
    # the old constant (0.55 bytes a parameter) left the 16-bit embeddings out: 5.1B x 0.55 = 2.6 GiB
    assert est.weights_gib == pytest.approx(mem.weights_bytes(arch.config, "bitsandbytes", "auto", arch.encoder_params()) / 2**30)
    assert est.weights_gib > (262144 * 35 * 256 + 262144 * 1536) * 2 / 2**30 > 5.1e9 * 0.55 / 2**30
    assert est.kv_gib == pytest.approx(75_694_080 / 2**30) and est.activation_gib is not None
    assert est.engine_gib == pytest.approx(est.weights_gib + est.kv_gib + est.activation_gib) and est.fits
    big = by["qwen2.5-72b-awq"]  # max_model_len 2048 and 0.96 of the GPU, as the study ran it
    e72 = sweep_memory.estimate(big, big.spec, 256, 100, 101, 1, cfg.gpu)
    assert e72.kv_gib == pytest.approx(80 * 2 * 8 * 128 * 2 * 2048 / 2**30) and e72.engine_gib is not None
    assert e72.fits and e72.engine_gib < 0.96 * 48 and e72.per_gpu_gib == pytest.approx(e72.engine_gib)


def test_the_readout_plan_prints_the_three_terms():
    from sleight.readout.reproduce import load_table
    from sleight.readout.reproduce.plan import dry_run_lines, memory

    config = load_table("table4")
    ck = next(c for c in config.checkpoints if c.model == "Qwen/Qwen3-14B")
    spec = next(iter(config.runs.values()))
    m = memory(ck, "float16", spec)
    assert m is not None and m.weights_gib == pytest.approx(14_768_307_200 * 2 / 2**30)
    lines = dry_run_lines(config, [ck])
    assert f"(weights {m.weights_gib:.1f} + KV {m.kv_gib:.1f} + activations {m.activation_gib:.1f})" in lines[1]
