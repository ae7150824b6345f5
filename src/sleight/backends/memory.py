"""A model's memory on vLLM from its ``config.json`` alone, in three terms: the weights counted tensor
by tensor in what the quantization method stores for each, the KV cache that one request at
``max_model_len`` needs, and the activations of vLLM's profiling run. Pure arithmetic on a
transformers-style config mapping; nothing loads. Read against vLLM 0.32.0 (the files named below;
the same paths upstream in vllm-project/vllm).

* **Weights.** Each layer's shapes as vLLM builds them (``model_executor/models/*.py``); a method
  quantizes only ``LinearBase`` and ``FusedMoE`` layers (``layers/quantization/*``:
  ``get_quant_method`` returns nothing for ``VocabParallelEmbedding``/``ParallelLMHead``), so
  embeddings, the output layer, norms, biases and routers stay 16-bit. AWQ/GPTQ store 4-bit codes,
  a float16 scale and a packed zero per group (GPTQ also an int32 ``g_idx`` per input);
  bitsandbytes in flight stores NF4 in 64-weight blocks with ``compress_statistics=True`` and
  dequantizes the nested absmax to float32 at load (``model_loader/bitsandbytes_loader.py``
  ``_unquantized_generator``, ``_dequantize_dq``): 4 bits + 4 bytes a block; fp8 one byte a weight;
  MXFP4 (gpt-oss) quantizes the experts only, 4 bits + one E8M0 scale per 32. Gemma 3n/4 E2B/E4B
  carry per-layer embeddings (``gemma4.py``: ``embed_tokens_per_layer``, vocab x layers x 256,
  16-bit), drop K/V projections in their KV-shared layers and double those layers' MLP
  (``use_double_wide_mlp``); ``attention_k_eq_v`` layers still get a V slot
  (``QKVParallelLinear``). Encoder towers (vision, audio) are the caller's ``extra_params``,
  counted in 16 bits.
* **KV cache.** vLLM refuses to start unless its cache holds one request at ``max_model_len``
  (``v1/core/kv_cache_utils.py`` ``check_enough_kv_cache_memory``), sized per layer by its spec's
  ``max_memory_usage_bytes`` (``v1/kv_cache_interface.py``): a full-attention layer
  ``cdiv(len, block) * page``; a sliding-window layer ``cdiv(min(window - 1 + in-flight tokens, len),
  block) + 1`` pages, the in-flight tokens being ``max_num_batched_tokens`` per batch in flight (two
  under async scheduling, ``config/vllm.py`` ``max_in_flight_tokens``); a page holds K and V of
  ``block`` tokens; a KV-shared layer none; a linear-attention (Gated DeltaNet) layer one fixed
  state per request (its conv window, and its recurrent state in ``mamba_ssm_dtype``).
* **Activations.** vLLM takes from its share weights, the *transient peak* of a profiling run, and
  non-torch memory (``v1/worker/gpu_worker.py`` ``determine_available_memory``,
  ``utils/mem_utils.py`` ``memory_profiling``: ``non_kv_cache_memory = total_consumed +
  transient_peak_headroom``) and gives the rest to the KV cache. The run is one dummy forward of
  ``max_num_batched_tokens`` tokens and the sampler on ``min(max_num_seqs, tokens)`` rows
  (``v1/worker/gpu_model_runner.py`` ``profile_run``, ``_dummy_sampler_run``), whose defaults
  depend on the GPU (``engine/arg_utils.py`` ``get_batch_defaults``: :func:`vllm_profile`). Counted
  here: per token the residual, the hidden state and a normed copy plus the widest layer's
  intermediates (the MLP's gate/up and activated halves, or the experts' for the chosen ones, or
  attention's q/k/v and output) and Gemma's per-layer inputs; per sampled row the logits in the
  model's dtype, their float32 copy, the softmax and the exponential noise
  (``v1/sample/sampler.py``, ``ops/topk_topp_sampler.py`` ``random_sample``); and, where the kernel
  dequantizes a whole weight for a prefill (bitsandbytes; AWQ's non-Marlin kernel from 256 tokens),
  the widest such weight in 16 bits. Not counted: non-torch memory (the CUDA context, NCCL, cuBLAS
  workspaces), a multimodal encoder's profiling pass, CUDA graphs (vLLM subtracts their estimate
  only under ``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

GIB = 1 << 30
DTYPE_BYTES = {"float32": 4, "float": 4, "float16": 2, "half": 2, "bfloat16": 2}
SAMPLER_BYTES = 12  # per logit beyond its own dtype: the float32 copy, the softmax, the exponential noise
BNB_BLOCK = 64  # weights per bitsandbytes NF4 block (one float32 absmax each once vLLM undoes the nesting)
MXFP4_BLOCK = 32  # weights per MXFP4 scale (one E8M0 byte)
# Methods that store the checkpoint's own packed 4-bit codes per group (scales float16, zeros packed).
GROUPED_INT4 = ("awq", "awq_marlin", "gptq", "gptq_marlin", "compressed-tensors")


@dataclass(frozen=True)
class Profile:
    """vLLM's profiling run and KV blocks: ``max_num_batched_tokens``, ``max_num_seqs``, tokens a KV
    block holds, batches in flight."""

    batched_tokens: int = 8192
    seqs: int = 256
    block_size: int = 16
    in_flight: int = 2


@dataclass(frozen=True)
class Memory:
    """One model's memory in GiB, the three terms a vLLM engine takes from its share of a GPU."""

    weights_gib: float
    kv_gib: float
    activation_gib: float

    @property
    def total_gib(self) -> float:
        return self.weights_gib + self.kv_gib + self.activation_gib


@dataclass(frozen=True)
class Tensor:
    """``count`` tensors of ``rows`` x ``cols`` (a vector: ``cols`` 1); ``linear``: a layer a
    quantization method may store quantized (a ``LinearBase`` or an expert of a ``FusedMoE``)."""

    name: str
    rows: int
    cols: int
    count: int = 1
    linear: bool = False
    expert: bool = False

    @property
    def params(self) -> int:
        return self.rows * self.cols * self.count


@dataclass(frozen=True)
class Quant:
    """How a method stores a quantized weight: ``method`` ("" for none), bits and group size."""

    method: str = ""
    bits: int = 16
    group: int = 128
    skip: tuple[str, ...] = ()  # module names left unquantized (AWQ's ``modules_to_not_convert``)

    def quantizes(self, t: Tensor) -> bool:
        if not self.method or not t.linear or any(s in t.name for s in self.skip):
            return False
        return t.expert if self.method == "mxfp4" else True


# -- reading a config ------------------------------------------------------------------------------
def _int(cfg: Mapping[str, object], key: str, default: int = 0) -> int:
    v = cfg.get(key)
    return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else default


def _flag(cfg: Mapping[str, object], key: str) -> bool:
    return cfg.get(key) is True


def _map(cfg: Mapping[str, object], key: str) -> Mapping[str, object]:
    v = cfg.get(key)
    return {str(k): x for k, x in v.items()} if isinstance(v, Mapping) else {}


def text_config(config: Mapping[str, object]) -> Mapping[str, object]:
    """The language model's own settings: ``text_config`` where a multimodal checkpoint nests them,
    with the top level's ``tie_word_embeddings`` where the text part says nothing."""
    text = _map(config, "text_config")
    if not text:
        return config
    merged = dict(text)
    if "tie_word_embeddings" not in merged and "tie_word_embeddings" in config:
        merged["tie_word_embeddings"] = config["tie_word_embeddings"]
    return merged


def context_length(config: Mapping[str, object]) -> int:
    """The model's own longest context (``max_position_embeddings``; vLLM's ``max_model_len`` when
    none is given), 4096 where the config names none."""
    text = text_config(config)
    return _int(text, "max_position_embeddings") or _int(config, "max_position_embeddings") or 4096


def layer_kinds(text: Mapping[str, object]) -> list[str]:
    """Each decoder layer's attention: ``full``, ``sliding`` or ``linear``; from ``layer_types``,
    else Gemma 3's ``sliding_window_pattern`` (every Nth layer full), else all full (vLLM slides
    only where the config says which layers do); Qwen3.5's ``full_attention_interval`` makes the
    others linear."""
    n = _int(text, "num_hidden_layers") or _int(text, "n_layer")
    types = text.get("layer_types")
    if isinstance(types, Sequence) and not isinstance(types, str) and len(types) == n:
        names = {"sliding_attention": "sliding", "linear_attention": "linear"}
        return [names.get(str(t), "full") for t in types]
    interval = _int(text, "full_attention_interval")
    if interval:  # Qwen3-Next/3.5: linear attention, every Nth layer full
        return ["full" if (i + 1) % interval == 0 else "linear" for i in range(n)]
    pattern = _int(text, "sliding_window_pattern")
    if pattern and text.get("sliding_window"):
        return ["full" if (i + 1) % pattern == 0 else "sliding" for i in range(n)]
    return ["full"] * n


@dataclass(frozen=True)
class _Attn:
    heads: int
    kv_heads: int
    head_dim: int
    shared: bool  # a KV-shared layer (Gemma 3n/4): no K/V projections and no cache of its own


def _hidden(text: Mapping[str, object]) -> int:
    """The model width: ``hidden_size``, or GPT-2's ``n_embd``."""
    return _int(text, "hidden_size") or _int(text, "n_embd")


def _attention(text: Mapping[str, object], kinds: list[str], i: int) -> _Attn:
    hidden = _hidden(text)
    heads = _int(text, "num_attention_heads") or _int(text, "n_head")
    if text.get("multi_query") is True:
        kv = 1
    else:
        kv = _int(text, "num_key_value_heads") or _int(text, "num_kv_heads") or heads
    head_dim = _int(text, "head_dim") or hidden // heads
    if kinds[i] == "full" and _int(text, "global_head_dim"):  # Gemma 4's global layers
        head_dim = _int(text, "global_head_dim")
        if text.get("attention_k_eq_v", True) is not False and _int(text, "num_global_key_value_heads"):
            kv = _int(text, "num_global_key_value_heads")
    shared_from = len(kinds) - _int(text, "num_kv_shared_layers")
    return _Attn(heads, kv, head_dim, 0 < shared_from <= i)


# -- the weights, tensor by tensor -----------------------------------------------------------------
def tensors(config: Mapping[str, object]) -> list[Tensor]:
    """The text model's tensors as vLLM allocates them (encoder towers are not here); an
    encoder–decoder T5's as transformers builds it (:func:`t5_tensors`)."""
    text = text_config(config)
    mtype = str(text.get("model_type") or config.get("model_type") or "")
    if _int(text, "d_model") and text.get("is_encoder_decoder") is True:
        return t5_tensors(text)
    if mtype == "gpt2":
        return gpt2_tensors(text)
    hidden = _int(text, "hidden_size")
    vocab = _int(text, "vocab_size")
    kinds = layer_kinds(text)
    gemma = mtype.startswith("gemma")
    qk_norm = mtype.startswith(("qwen3", "gemma3", "gemma4"))
    out: list[Tensor] = [Tensor("embed_tokens", vocab, hidden)]
    if not (text.get("tie_word_embeddings") is True or (mtype.startswith("falcon") and text.get("tie_word_embeddings") is not False)):
        out.append(Tensor("lm_head", vocab, hidden))
    norm_bias = 2 if mtype.startswith("falcon") else 1  # LayerNorm with a bias
    out.append(Tensor("norm", hidden, 1, norm_bias))
    ple = _int(text, "hidden_size_per_layer_input")
    if ple:  # Gemma 3n/4 per-layer embeddings: one table for every layer, and the model's projection into it
        width = ple * len(kinds)
        out += [Tensor("embed_tokens_per_layer", _int(text, "vocab_size_per_layer_input") or vocab, width),
                Tensor("per_layer_model_projection", width, hidden, linear=True), Tensor("per_layer_projection_norm", ple, 1)]  # fmt: skip
    for i in range(len(kinds)):
        out += _layer(text, mtype, kinds, i, hidden, gemma, qk_norm)
    return out


def t5_tensors(text: Mapping[str, object]) -> list[Tensor]:
    """A T5-family encoder–decoder (T5, Flan-T5, UL2; App. F's checkpoints): the shared embedding and
    an output layer unless tied; per encoder layer self-attention and the feed-forward block, per
    decoder layer self- and cross-attention and the block (two input projections when gated); the
    relative position biases of each stack's first layer; RMS norms (weights only). It reads no KV
    cache: App. F's teacher-forced pass keeps none (:mod:`sleight.backends.seq2seq`)."""
    d, vocab, heads = _int(text, "d_model"), _int(text, "vocab_size"), _int(text, "num_heads")
    inner, ff = heads * _int(text, "d_kv"), _int(text, "d_ff")
    enc_layers = _int(text, "num_layers")
    dec_layers = _int(text, "num_decoder_layers") or enc_layers
    gated = text.get("is_gated_act") is True or str(text.get("feed_forward_proj") or "").startswith("gated")
    attn = [Tensor("q_k_v", inner, d, 3, linear=True), Tensor("o", d, inner, linear=True)]
    ffn = [Tensor("wi", ff, d, 2 if gated else 1, linear=True), Tensor("wo", d, ff, linear=True)]
    out = [Tensor("shared", vocab, d)]
    if text.get("tie_word_embeddings") is not True:
        out.append(Tensor("lm_head", vocab, d))
    buckets = _int(text, "relative_attention_num_buckets", 32)
    out += [Tensor("relative_attention_bias", buckets, heads, 2), Tensor("final_layer_norm", d, 1, 2)]
    for _ in range(enc_layers):
        out += [*attn, *ffn, Tensor("layer_norm", d, 1, 2)]
    for _ in range(dec_layers):
        out += [*attn, *attn, *ffn, Tensor("layer_norm", d, 1, 3)]
    return out


def gpt2_tensors(text: Mapping[str, object]) -> list[Tensor]:
    """GPT-2 (App. C.6's tokenizer; its shapes for the plan): token and position embeddings (the
    output layer tied), per layer the fused QKV, the attention output and the two MLP layers, each
    with a bias, and two LayerNorms (weight and bias); the final LayerNorm."""
    d, vocab, layers = _int(text, "n_embd"), _int(text, "vocab_size"), _int(text, "n_layer")
    inner = _int(text, "n_inner") or 4 * d
    out = [Tensor("wte", vocab, d), Tensor("wpe", _int(text, "n_positions", 1024), d), Tensor("ln_f", d, 1, 2)]
    for i in range(layers):
        p = f"h.{i}."
        out += [
            Tensor(p + "attn.c_attn", 3 * d, d, linear=True), Tensor(p + "attn.c_proj", d, d, linear=True),
            Tensor(p + "mlp.c_fc", inner, d, linear=True), Tensor(p + "mlp.c_proj", d, inner, linear=True),
            Tensor(p + "biases", 3 * d + d + inner + d, 1), Tensor(p + "ln", d, 1, 4),
        ]
    return out


def _layer(text: Mapping[str, object], mtype: str, kinds: list[str], i: int, hidden: int, gemma: bool, qk_norm: bool) -> list[Tensor]:
    p = f"layers.{i}."
    out: list[Tensor] = []
    if kinds[i] == "linear":  # Gated DeltaNet (Qwen3.5/3.6, Qwen3-Next)
        nk, dk = _int(text, "linear_num_key_heads"), _int(text, "linear_key_head_dim")
        nv, dv = _int(text, "linear_num_value_heads"), _int(text, "linear_value_head_dim")
        conv = 2 * nk * dk + nv * dv
        out += [Tensor(p + "linear_attn.in_proj_qkv", conv, hidden, linear=True), Tensor(p + "linear_attn.in_proj_z", nv * dv, hidden, linear=True),
                Tensor(p + "linear_attn.in_proj_ba", 2 * nv, hidden, linear=True), Tensor(p + "linear_attn.conv1d", conv, _int(text, "linear_conv_kernel_dim", 4)),
                Tensor(p + "linear_attn.dt_a", nv, 1, 2), Tensor(p + "linear_attn.norm", dv, 1),
                Tensor(p + "linear_attn.out_proj", hidden, nv * dv, linear=True)]  # fmt: skip
    else:
        a = _attention(text, kinds, i)
        q = a.heads * a.head_dim
        gate = 2 if text.get("attn_output_gate") is True else 1  # Qwen3.5's gated attention doubles q
        out.append(Tensor(p + "self_attn.q_proj", q * gate, hidden, linear=True))
        if not a.shared:
            out.append(Tensor(p + "self_attn.k_proj", a.kv_heads * a.head_dim, hidden, 2, linear=True))  # K and V
        out.append(Tensor(p + "self_attn.o_proj", hidden, q, linear=True))
        if mtype == "qwen2" or text.get("attention_bias") is True:  # Qwen2: q/k/v biases; attention_bias: o's too
            out.append(Tensor(p + "self_attn.bias", q + (0 if a.shared else 2 * a.kv_heads * a.head_dim) + (hidden if text.get("attention_bias") is True else 0), 1))
        if text.get("attention_bias") is True and mtype == "gpt_oss":
            out.append(Tensor(p + "self_attn.sinks", a.heads, 1))
        if qk_norm:
            out.append(Tensor(p + "self_attn.qk_norm", a.head_dim, 1, 1 if a.shared else 2))
    out += _mlp(text, mtype, kinds, i, hidden)
    norms = 1 if mtype.startswith("falcon") and text.get("new_decoder_architecture") is not True else (4 if gemma else 2)
    out.append(Tensor(p + "norms", hidden, 1, norms * (2 if mtype.startswith("falcon") else 1)))
    if mtype.startswith("gemma4"):
        out.append(Tensor(p + "layer_scalar", 1, 1))
    ple = _int(text, "hidden_size_per_layer_input")
    if ple:
        out += [Tensor(p + "per_layer_input_gate", ple, hidden, linear=True), Tensor(p + "per_layer_projection", hidden, ple, linear=True),
                Tensor(p + "post_per_layer_input_norm", hidden, 1)]  # fmt: skip
    return out


def _mlp(text: Mapping[str, object], mtype: str, kinds: list[str], i: int, hidden: int) -> list[Tensor]:
    p = f"layers.{i}."
    out: list[Tensor] = []
    experts = _int(text, "num_experts") or _int(text, "num_local_experts")
    inter = _int(text, "intermediate_size") or _int(text, "ffn_hidden_size")
    dense = not experts or mtype.startswith("gemma4")  # Gemma 4's MoE layers keep a dense MLP beside the experts
    if mtype == "gpt_oss":
        dense = False
    if dense:
        shared_from = len(kinds) - _int(text, "num_kv_shared_layers")
        if text.get("use_double_wide_mlp") is True and 0 < shared_from <= i:
            inter *= 2
        if mtype.startswith("falcon"):  # dense_h_to_4h and dense_4h_to_h, no gate
            inter = inter or 4 * hidden
            out += [Tensor(p + "mlp.dense_h_to_4h", inter, hidden, linear=True), Tensor(p + "mlp.dense_4h_to_h", hidden, inter, linear=True)]
        else:
            out += [Tensor(p + "mlp.gate_up_proj", inter, hidden, 2, linear=True), Tensor(p + "mlp.down_proj", hidden, inter, linear=True)]
    if experts:
        e_inter = _int(text, "moe_intermediate_size") or _int(text, "expert_intermediate_size") or inter
        out += [Tensor(p + "experts.w13", e_inter, hidden, 2 * experts, linear=True, expert=True),
                Tensor(p + "experts.w2", hidden, e_inter, experts, linear=True, expert=True),
                Tensor(p + "router", experts, hidden)]  # fmt: skip
        if mtype == "gpt_oss":  # biases of the experts and of the router
            out.append(Tensor(p + "experts.bias", 2 * e_inter + hidden, 1, experts))
            out.append(Tensor(p + "router.bias", experts, 1))
        if mtype.startswith("gemma4"):  # the router's scale and per-expert scale, and the MoE block's three norms
            out.append(Tensor(p + "router.scales", hidden + experts, 1))
            out.append(Tensor(p + "moe_norms", hidden, 1, 3))
        shared = _int(text, "shared_expert_intermediate_size")
        if shared:
            out += [Tensor(p + "shared_expert.gate_up_proj", shared, hidden, 2, linear=True), Tensor(p + "shared_expert.down_proj", hidden, shared, linear=True)]
    return out


def quant_of(config: Mapping[str, object], quantization: str | None) -> Quant:
    """The method a load uses: the one named, else the checkpoint's own ``quantization_config``
    (vLLM detects it, as gpt-oss's MXFP4); its bits and group size from the checkpoint."""
    qc = _map(config, "quantization_config") or _map(text_config(config), "quantization_config")
    method = (quantization or str(qc.get("quant_method") or "")).lower()
    if not method:
        return Quant()
    skip = qc.get("modules_to_not_convert")
    skipped = tuple(str(s) for s in skip) if isinstance(skip, Sequence) and not isinstance(skip, str) else ()
    bits, group = _int(qc, "bits", 4), _int(qc, "group_size", 128)
    if method == "compressed-tensors":
        for g in _map(qc, "config_groups").values():
            if isinstance(g, Mapping):
                w = {str(k): v for k, v in g.items()}.get("weights")
                if isinstance(w, Mapping):
                    wm = {str(k): v for k, v in w.items()}
                    bits, group = _int(wm, "num_bits", 4), _int(wm, "group_size", 128)
    if method.startswith("fp8"):
        bits = 8
    elif method in ("bitsandbytes", "mxfp4"):
        bits = 4
    return Quant(method, bits, group if group > 0 else 128, skipped if method in ("awq", "awq_marlin", "gptq", "gptq_marlin") else ())


def tensor_bytes(t: Tensor, q: Quant, act_bytes: int) -> float:
    """Bytes ``t`` takes once loaded under ``q`` (16-bit ``act_bytes`` where ``q`` leaves it)."""
    if not q.quantizes(t):
        return t.params * act_bytes
    n_out, n_in, n = t.rows, t.cols, t.count
    weights = n_out * n_in
    if q.method in GROUPED_INT4:
        groups = math.ceil(n_in / q.group) * n_out
        per = weights * q.bits / 8 + groups * (2 + q.bits / 8)  # codes, then a float16 scale and a packed zero per group
        if q.method.startswith("gptq"):
            per += n_in * 4  # g_idx
    elif q.method == "bitsandbytes":
        per = weights / 2 + math.ceil(weights / BNB_BLOCK) * 4
    elif q.method == "mxfp4":
        per = weights / 2 + math.ceil(n_in / MXFP4_BLOCK) * n_out
    elif q.method.startswith("fp8"):
        per = weights + 4  # one byte a weight, one float32 scale
    else:
        per = weights * q.bits / 8
    return per * n


def act_bytes(config: Mapping[str, object], dtype: str | None) -> int:
    """Bytes of an activation (and of a 16-bit weight, a KV entry): the dtype given, else the
    checkpoint's, float32 ones downcast to 16 bits as vLLM's ``auto`` does (``config/model.py``
    ``_resolve_auto_dtype``)."""
    if dtype and dtype != "auto":
        return DTYPE_BYTES[dtype]
    own = str(text_config(config).get("torch_dtype") or text_config(config).get("dtype") or config.get("torch_dtype") or config.get("dtype") or "")
    return min(DTYPE_BYTES.get(own, 2), 2)


def weights_bytes(config: Mapping[str, object], quantization: str | None, dtype: str | None, extra_params: int = 0) -> float:
    """Every tensor of the text model under its method, plus ``extra_params`` 16-bit encoder weights."""
    q, b = quant_of(config, quantization), act_bytes(config, dtype)
    return sum(tensor_bytes(t, q, b) for t in tensors(config)) + extra_params * b


# -- the KV cache ----------------------------------------------------------------------------------
def kv_bytes(config: Mapping[str, object], dtype: str | None, max_model_len: int, profile: Profile = Profile(), sequences: int = 1) -> int:
    """What ``sequences`` requests of ``max_model_len`` tokens need, layer by layer, as vLLM sizes
    it (module docstring); the KV cache in the activations' dtype (``kv_cache_dtype`` auto)."""
    text = text_config(config)
    kinds = layer_kinds(text)
    b, block = act_bytes(config, dtype), profile.block_size
    window = _int(text, "sliding_window")
    total = 0
    for i, kind in enumerate(kinds):
        if kind == "linear":
            nk, dk = _int(text, "linear_num_key_heads"), _int(text, "linear_key_head_dim")
            nv, dv = _int(text, "linear_num_value_heads"), _int(text, "linear_value_head_dim")
            conv = (2 * nk * dk + nv * dv) * (_int(text, "linear_conv_kernel_dim", 4) - 1) * b
            ssm = nv * dk * dv * DTYPE_BYTES.get(str(text.get("mamba_ssm_dtype") or ""), b)
            total += conv + ssm
            continue
        a = _attention(text, kinds, i)
        if a.shared:
            continue
        page = block * 2 * a.kv_heads * a.head_dim * b
        if kind == "sliding" and window:
            tokens = min(window - 1 + profile.in_flight * profile.batched_tokens, max_model_len)
            total += (math.ceil(tokens / block) + 1) * page
        else:
            total += math.ceil(max_model_len / block) * page
    return total * sequences


def kv_bytes_per_token(config: Mapping[str, object], dtype: str | None) -> int:
    """K and V of one token in every layer that keeps them (the per-token rate a CPU run's fixed
    KV budget is divided by)."""
    text = text_config(config)
    kinds = layer_kinds(text)
    b = act_bytes(config, dtype)
    return sum(2 * a.kv_heads * a.head_dim * b for i, k in enumerate(kinds) if k != "linear" and not (a := _attention(text, kinds, i)).shared)


# -- the profiling run's activations ---------------------------------------------------------------
def activation_bytes(config: Mapping[str, object], quantization: str | None, dtype: str | None, profile: Profile = Profile()) -> float:
    """The transient peak of vLLM's profiling run (module docstring)."""
    text = text_config(config)
    mtype = str(text.get("model_type") or config.get("model_type") or "")
    b = act_bytes(config, dtype)
    hidden, vocab = _hidden(text), _int(text, "vocab_size")
    kinds = layer_kinds(text)
    widest = 0.0  # per token, bytes, the widest layer's intermediates
    for i, kind in enumerate(kinds):
        if kind == "linear":
            nk, dk = _int(text, "linear_num_key_heads"), _int(text, "linear_key_head_dim")
            nv, dv = _int(text, "linear_num_value_heads"), _int(text, "linear_value_head_dim")
            attn = (2 * nk * dk + 3 * nv * dv + 2 * nv) * b
        else:
            a = _attention(text, kinds, i)
            gate = 2 if text.get("attn_output_gate") is True else 1
            attn = (a.heads * a.head_dim * (gate + 1) + 2 * a.kv_heads * a.head_dim) * b
        mlp = 0.0
        for t in _mlp(text, mtype, kinds, i, hidden):
            if t.name.endswith("gate_up_proj"):
                mlp += 3 * t.rows * b  # gate and up, then the activated half
            elif t.name.endswith("dense_h_to_4h"):
                mlp += 2 * t.rows * b  # the 4x layer's output and its activation
            elif t.name.endswith("experts.w13"):
                top_k = _int(text, "num_experts_per_tok") or _int(text, "top_k_experts") or _int(text, "experts_per_token") or 1
                mlp += top_k * (3 * t.rows + hidden) * b + (t.count // 2) * 4  # the chosen experts' intermediates, float32 router logits
        widest = max(widest, attn, mlp)
    ple = 2 * _int(text, "hidden_size_per_layer_input") * len(kinds) * b
    forward = profile.batched_tokens * (3 * hidden * b + widest + ple)
    rows = min(profile.seqs, profile.batched_tokens)
    sampler = rows * vocab * (b + SAMPLER_BYTES)
    q = quant_of(config, quantization)
    dequant = 0.0
    if q.method == "bitsandbytes" or (q.method in ("awq", "gptq") and profile.batched_tokens >= 256):
        dequant = max((t.rows * t.cols * b for t in tensors(config) if q.quantizes(t) and not t.expert), default=0)  # one shard at a time
    return forward + sampler + dequant


def memory(
    config: Mapping[str, object],
    quantization: str | None,
    dtype: str | None,
    max_model_len: int,
    profile: Profile = Profile(),
    *,
    sequences: int = 1,
    extra_params: int = 0,
) -> Memory:
    """Weights, KV cache for ``sequences`` requests of ``max_model_len`` tokens, and the profiling
    run's activations of one model on one GPU, in GiB (pure)."""
    return Memory(
        weights_bytes(config, quantization, dtype, extra_params) / GIB,
        kv_bytes(config, dtype, max_model_len, profile, sequences) / GIB,
        activation_bytes(config, quantization, dtype, profile) / GIB,
    )


def vllm_profile(gpu_name: str, memory_gib: float, engine_args: Mapping[str, object] | None = None) -> Profile:
    """vLLM's offline (``LLM``) defaults for a GPU of ``memory_gib`` (``engine/arg_utils.py``
    ``get_batch_defaults``: 16384 tokens and 1024 rows from 70 GiB, A100s excepted; 8192 and 256
    below), overridden by ``max_num_batched_tokens`` / ``max_num_seqs`` / ``block_size`` where a
    spec's engine arguments give them."""
    big = memory_gib >= 160 or (memory_gib >= 70 and "a100" not in gpu_name.lower())
    args = dict(engine_args or {})
    return Profile(
        _int(args, "max_num_batched_tokens", 16384 if big else 8192),
        _int(args, "max_num_seqs", 1024 if big else 256),
        _int(args, "block_size", 16),
    )
