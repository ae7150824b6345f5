"""A 4-bit AWQ checkpoint of the bundled model, built offline, and its exact float twin.

No AWQ checkpoint ships with the project and none may be downloaded, so the vLLM quantization test
makes one: round-to-nearest (AutoAWQ's ``pseudo_quantize_tensor`` with a zero point, no activation
search) of every decoder linear layer of the bundled SmolLM2-135M, written in AutoAWQ's GEMM layout
(``WQLinear_GEMM.from_linear``), which is what vLLM's ``awq`` loader reads. Embeddings, norms and
the (tied) lm_head stay float.

Beside it goes the *dequantized* model, ``(q - z) * s`` per group, as a plain float32 folder: the
exact values the int4 codes represent (``q - z`` is a small integer and ``s`` a float16, so the
product is exact in float32). A test then compares like with like: vLLM's int4 kernel on the AWQ
folder against the hf engine on the float folder, where only the arithmetic differs.

Layout (AutoAWQ ``awq/modules/linear/gemm.py``; vLLM ``model_executor/layers/quantization/auto_awq.py``
``_convert_awq_to_standard_format``), for a linear layer of ``in`` inputs and ``out`` outputs:

* ``qweight`` int32 ``[in, out // 8]``: eight 4-bit codes per int32 along the output dimension, the
  code of output ``8c + AWQ_PACK_ORDER[i]`` in bits ``4i .. 4i+3`` (vLLM undoes it with
  ``_REVERSE_AWQ_PACK_ORDER = [0, 4, 1, 5, 2, 6, 3, 7]``, the inverse permutation);
* ``qzeros`` int32 ``[in // group, out // 8]``: the integer zero points, packed the same way;
* ``scales`` float16 ``[in // group, out]``.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file

BITS = 4
MAX_CODE = (1 << BITS) - 1  # 15
PACK = 32 // BITS  # codes per int32
AWQ_PACK_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)  # AutoAWQ's order_map: bit slot i holds output column ORDER[i]
LINEARS = (
    "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
    "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj",
)  # fmt: skip
# Everything a folder needs besides its weights and config (tokenizer, chat template, generation defaults).
SIDE_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "generation_config.json")
DEFAULT_MODEL = "smollm2-135m-instruct"


def quantize_rtn(w: torch.Tensor, group_size: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Round-to-nearest asymmetric 4-bit quantization of ``w`` ``[out, in]`` in groups of
    ``group_size`` inputs, as AutoAWQ's ``pseudo_quantize_tensor`` (zero point) does, except that the
    codes are rounded against the float16 scale the checkpoint stores, so that they are exactly
    what a reader of the checkpoint dequantizes.

    Returns the codes ``[out, in]`` (0..15), zero points ``[out, in // group]`` (0..15) and float16
    scales ``[out, in // group]``.
    """
    out_f, in_f = w.shape
    if in_f % group_size:
        raise ValueError(f"group size {group_size} does not divide the layer's {in_f} inputs")
    g = w.detach().double().reshape(out_f, in_f // group_size, group_size)
    lo, hi = g.amin(dim=2), g.amax(dim=2)
    scales = ((hi - lo).clamp(min=1e-5) / MAX_CODE).to(torch.float16)
    s = scales.double()
    zeros = (-torch.round(lo / s)).clamp(0, MAX_CODE)
    codes = (torch.round(g / s[..., None]) + zeros[..., None]).clamp(0, MAX_CODE)
    return codes.reshape(out_f, in_f).to(torch.int32), zeros.to(torch.int32), scales


def dequantize(codes: torch.Tensor, zeros: torch.Tensor, scales: torch.Tensor, group_size: int) -> torch.Tensor:
    """``(q - z) * s`` per group, in float32 (exact: an integer of at most 4 bits times a float16)."""
    out_f, in_f = codes.shape
    q = codes.reshape(out_f, in_f // group_size, group_size).float()
    w = (q - zeros.float()[..., None]) * scales.float()[..., None]
    return w.reshape(out_f, in_f)


def pack_awq(values: torch.Tensor) -> torch.Tensor:
    """Pack 4-bit values ``[rows, cols]`` into int32 ``[rows, cols // 8]`` along the columns in
    AutoAWQ's order (bit slot ``i`` of word ``c`` holds column ``8c + AWQ_PACK_ORDER[i]``)."""
    rows, cols = values.shape
    if cols % PACK:
        raise ValueError(f"{cols} columns do not pack into int32 words of {PACK}")
    v = values.to(torch.int64).reshape(rows, cols // PACK, PACK)[:, :, list(AWQ_PACK_ORDER)]
    shifts = torch.arange(0, 32, BITS, dtype=torch.int64)
    words = (v << shifts).sum(dim=2)  # < 2**32, then reinterpreted as signed int32
    return torch.where(words >= 1 << 31, words - (1 << 32), words).to(torch.int32)


def unpack_awq(words: torch.Tensor) -> torch.Tensor:
    """The inverse of :func:`pack_awq` (vLLM's unpack with ``_REVERSE_AWQ_PACK_ORDER``), for the self-check."""
    shifts = torch.arange(0, 32, BITS, dtype=torch.int32)
    slots = (words.unsqueeze(-1) >> shifts) & MAX_CODE  # slot i of each word
    inverse = [AWQ_PACK_ORDER.index(j) for j in range(PACK)]  # [0, 4, 1, 5, 2, 6, 3, 7]
    return slots[:, :, inverse].reshape(words.shape[0], -1)


def build_awq_checkpoint(dest: Path, group_size: int, *, model: str = DEFAULT_MODEL) -> Path:
    """Write ``dest/awq`` (the AWQ GEMM checkpoint) and ``dest/float`` (its dequantized float32
    weights, every other tensor as in the source) and return ``dest/awq``; the float folder is
    :func:`float_folder` of it. Offline: the source is the bundled model's converted HF folder."""
    from sleight.backends.resolve import resolve

    src = Path(resolve(model).load_path)
    awq_dir, float_dir = dest / "awq", dest / "float"
    awq: dict[str, torch.Tensor] = {}
    plain: dict[str, torch.Tensor] = {}
    with safe_open(str(src / "model.safetensors"), framework="pt") as f:
        for name in f.keys():
            t = f.get_tensor(name)
            layer = name.removesuffix(".weight")
            if any(name.endswith(f".{lin}.weight") for lin in LINEARS):
                codes, zeros, scales = quantize_rtn(t, group_size)
                if not torch.equal(unpack_awq(pack_awq(codes.t().contiguous())), codes.t()):
                    raise AssertionError("AWQ packing does not round-trip")  # the order, checked on real data
                awq[f"{layer}.qweight"] = pack_awq(codes.t().contiguous())  # [in, out // 8]
                awq[f"{layer}.qzeros"] = pack_awq(zeros.t().contiguous())  # [in // group, out // 8]
                awq[f"{layer}.scales"] = scales.t().contiguous()  # [in // group, out], float16
                plain[name] = dequantize(codes, zeros, scales, group_size)
            else:
                awq[name] = plain[name] = t.float().contiguous()
    if not any(k.endswith(".qweight") for k in awq):
        raise AssertionError(f"no decoder linear layer found in {src}")
    config = json.loads((src / "config.json").read_text())
    for folder, tensors in ((awq_dir, awq), (float_dir, plain)):
        folder.mkdir(parents=True, exist_ok=True)
        save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
        for side in SIDE_FILES:
            if (src / side).is_file():
                shutil.copy2(src / side, folder / side)
    (float_dir / "config.json").write_text(json.dumps(config, indent=2))
    config["quantization_config"] = {
        "quant_method": "awq", "bits": BITS, "group_size": group_size, "zero_point": True, "version": "gemm",
    }  # fmt: skip
    (awq_dir / "config.json").write_text(json.dumps(config, indent=2))
    return awq_dir


def float_folder(awq_dir: Path) -> Path:
    """The dequantized float32 folder written beside ``awq_dir`` by :func:`build_awq_checkpoint`."""
    return awq_dir.parent / "float"
