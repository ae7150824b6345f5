"""The dry runs' memory estimate (``sleight.backends.memory``) against what vLLM-CPU reports for the
same checkpoint (issue #34 item 10): the bundled SmolLM2-135M, and a 4-bit AWQ checkpoint of it.

    flock /tmp/cpu.lock python benchmarks/memory_plan.py            # both, about a minute on two cores
    python benchmarks/memory_plan.py --skip-awq                      # the bundled model only

Per checkpoint, estimate against reported:

* *weights*: the estimate's tensor-by-tensor bytes against the model vLLM built (``LLM.apply_model``):
  every parameter and buffer, plus the linear layers vLLM-CPU moved out of torch into oneDNN
  (``layers/utils.py`` ``dispatch_cpu_unquantized_gemm`` leaves an empty ``weight``; counted at
  the input x output size the layer records); and against the checkpoint's tensors (its
  safetensors headers), floating-point ones other than AWQ's scales at the dtype the run loads;
* *KV cache*: the tokens the KV budget holds (``kv_cache_memory_bytes`` over the estimate's bytes
  a token, in whole ``block_size`` blocks) against the tokens vLLM says it holds (``CPU KV cache
  size: N tokens``: ``cache_config.num_gpu_blocks`` x ``block_size``); and the KV of one request
  at ``max_model_len``, estimated and at vLLM's rate (the budget over its tokens);
* *activations*: vLLM-CPU has no profiling run to read (``v1/worker/cpu_worker.py``
  ``determine_available_memory`` takes the KV budget as given, and skips the warm-up under eager
  execution with an explicit budget), so the estimate's term is printed beside "not reported".

No AWQ checkpoint ships with the project and none may be downloaded: ``tests/awq_checkpoint.py``
writes one from the bundled model (AutoAWQ's GEMM layout, group 64). vLLM-CPU runs AWQ only with
its AVX-512 kernel library (``cpu_gemm_wna16``); where the CPU lacks it the model still loads (the
kernel is first called in a forward pass, which this never runs), and if vLLM refuses anyway the
AWQ line compares the estimate with the file's own bytes only, and says why.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # the engine in this process: apply_model reads its model directly
import sleight  # noqa: E402,F401  its OpenMP settings, before torch loads (sleight/__init__.py)

GIB = 1 << 30
KV_BUDGET = 1 << 28  # 256 MiB of KV cache: plenty for the bundled model, small on two cores
MAX_LEN = 2048
BLOCK = 32  # sleight's CPU block size (sleight.backends.vllm.CPU_BLOCK_SIZE)
AWQ_GROUP = 64  # divides the bundled model's 576 and 1536 inputs (tests/test_vllm_quant.py)


def _reported(path: str, dtype: str, quantization: str | None) -> tuple[int, int, int]:
    """(parameter and buffer bytes of the model vLLM built, tokens its KV budget holds, its block size)."""
    import vllm

    kw: dict[str, object] = dict(
        model=path, dtype=dtype, max_model_len=MAX_LEN, kv_cache_memory_bytes=KV_BUDGET, enforce_eager=True, block_size=BLOCK, seed=0
    )
    if quantization:
        kw["quantization"] = quantization
    llm = vllm.LLM(**kw)
    try:

        def size(model: object) -> int:
            import torch

            assert isinstance(model, torch.nn.Module)
            tensors = {id(t): t for t in [*model.parameters(), *model.buffers()]}
            total = sum(t.numel() * t.element_size() for t in tensors.values())
            for layer in model.modules():  # weights vLLM-CPU handed to oneDNN: an empty weight is left behind
                w = getattr(layer, "weight", None)
                if hasattr(layer, "cpu_linear") and isinstance(w, torch.Tensor) and w.numel() == 0:
                    total += int(layer.input_size_per_partition) * int(layer.output_size_per_partition) * w.element_size()
            return total

        weights = int(llm.apply_model(size)[0])
        cache = llm.llm_engine.vllm_config.cache_config
        tokens = int(cache.num_gpu_blocks or 0) * int(cache.block_size)
        return weights, tokens, int(cache.block_size)
    finally:
        del llm


def _file_bytes(folder: Path, float_bytes: int) -> int:
    """Bytes of every tensor in a folder's safetensors files, from their headers: integer tensors
    and AWQ's float16 scales as stored, other floating-point ones at ``float_bytes`` (the dtype
    the run loads them in)."""
    total = 0
    for f in sorted(folder.glob("*.safetensors")):
        with f.open("rb") as fh:
            n = int.from_bytes(fh.read(8), "little")
            header = json.loads(fh.read(n))
        for name, v in header.items():
            if name == "__metadata__":
                continue
            stored = v["data_offsets"][1] - v["data_offsets"][0]
            is_float = v["dtype"] in ("F32", "F16", "BF16") and not name.endswith(".scales")
            total += stored // {"F32": 4, "F16": 2, "BF16": 2}[v["dtype"]] * float_bytes if is_float else stored
    return total


def _row(label: str, estimate: float, reported: float | None, unit: str = "GiB", note: str = "") -> str:
    def fmt(x: float) -> str:
        return f"{x / GIB:,.4f} GiB" if unit == "GiB" else f"{x:,.0f} {unit}"

    est = fmt(estimate)
    if reported is None:
        return f"  {label:<34} estimate {est:>18}   reported {'—':>18}   {note}"
    rep = fmt(reported)
    diff = (estimate - reported) / reported * 100 if reported else float("nan")
    return f"  {label:<34} estimate {est:>18}   reported {rep:>18}   {diff:+.2f}%  {note}".rstrip()


def check(name: str, path: Path, dtype: str, quantization: str | None, file_bytes: int | None) -> list[str]:
    from sleight.backends import memory as mem

    config = json.loads((path / "config.json").read_text(encoding="utf-8"))
    profile = mem.Profile(batched_tokens=4096, seqs=256, block_size=BLOCK)  # vLLM-CPU's offline defaults (engine/arg_utils.py)
    weights = mem.weights_bytes(config, quantization, dtype)
    per_token = mem.kv_bytes_per_token(config, dtype)
    one_request = mem.kv_bytes(config, dtype, MAX_LEN, profile)
    activations = mem.activation_bytes(config, quantization, dtype, profile)
    lines = [f"{name}: {path} ({dtype}{', ' + quantization if quantization else ''}, max_model_len {MAX_LEN}, KV budget {KV_BUDGET / GIB:g} GiB)"]
    try:
        built, tokens, block = _reported(str(path), dtype, quantization)
    except Exception as exc:  # noqa: BLE001 - a refusal is the finding here, said in one line
        lines.append(f"  vLLM-CPU did not load it: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
        built, tokens, block = None, 0, BLOCK
    lines.append(_row("weights (the model vLLM built)", weights, built))
    if file_bytes is not None:
        lines.append(_row("weights (the checkpoint's tensors)", weights, file_bytes))
    fit = KV_BUDGET // (per_token * block) * block
    lines.append(_row("KV tokens the budget holds", fit, tokens or None, "tokens", f"(estimate: {per_token:,} B a token)"))
    lines.append(_row(f"KV, one request of {MAX_LEN} tokens", one_request, (MAX_LEN + block - 1) // block * block * KV_BUDGET / tokens if tokens else None))
    lines.append(_row("activations (profiling run)", activations, None, note="vLLM-CPU runs no profiling run: nothing to read"))
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--skip-awq", action="store_true", help="the bundled model only")
    args = ap.parse_args(argv)

    from sleight.backends.resolve import resolve
    from sleight.cli.main import quiet_libraries

    quiet_libraries()
    bundled = Path(resolve("smollm2-135m-instruct").load_path)
    out = check("bundled SmolLM2-135M", bundled, "float32", None, _file_bytes(bundled, 4))
    if not args.skip_awq:
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
        from awq_checkpoint import build_awq_checkpoint

        with tempfile.TemporaryDirectory(prefix="memory-plan-awq-") as tmp:
            awq = build_awq_checkpoint(Path(tmp), AWQ_GROUP)
            out += check("AWQ of it (group 64, tests/awq_checkpoint.py)", awq, "float16", "awq", _file_bytes(awq, 2))
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
