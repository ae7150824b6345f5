"""Subcommands shared by both instruments (``models``, ``generate``; ``demo`` registers from its own
module), the flags every model-using command shares, and the output check every writing command
makes before it loads anything."""

from __future__ import annotations

import argparse
import json
import math
from typing import Any

from sleight.backends import DEFAULT_MODEL, ENGINES
from sleight.backends.spec import QUANTIZATIONS, ModelSpec
from sleight.errors import UserError
from sleight.paths import check_writable  # noqa: F401  (re-exported: every writing command checks its output)


def add_model_args(p: argparse.ArgumentParser, *, batch_size: int = 128, model: bool = True) -> None:
    """The flags every model-using command shares (``model=False``: all but ``--model``, for a
    command that takes several models)."""
    if model:
        p.add_argument("--model", default=DEFAULT_MODEL, help=f"model name, folder, .gguf file or hub id (default: {DEFAULT_MODEL})")
    p.add_argument("--engine", default="hf", choices=ENGINES, help="inference engine (default: hf)")
    p.add_argument("--device", default="auto", help="cpu, cuda, cuda:1 ... (default: cuda if available)")
    p.add_argument(
        "--dtype", default=None, choices=["auto", "float32", "bfloat16", "float16"],
        help="weights dtype; auto: the checkpoint's own (default: float32; on vllm with CUDA auto, as the study)",
    )
    p.add_argument("--batch-size", type=int, default=batch_size, help=f"rows per forward pass (default: {batch_size})")
    p.add_argument("--threads", type=int, default=None, metavar="N", help="CPU threads: torch's on hf, the cores vLLM's CPU worker binds on vllm (default: the engine's own; recorded)")
    add_template_args(p)
    g = p.add_argument_group("vllm engine (passed through to vllm.LLM)")
    g.add_argument("--revision", default=None, metavar="REV", help="the checkpoint's hub revision (a commit hash pins it)")
    g.add_argument("--quantization", default=None, choices=QUANTIZATIONS, help="vLLM quantization method (bitsandbytes loads with load_format bitsandbytes, as the study)")
    g.add_argument("--load-format", default=None, metavar="FMT", help="vLLM load format (default: vLLM's; bitsandbytes with --quantization bitsandbytes)")
    g.add_argument("--enforce-eager", default=None, action=argparse.BooleanOptionalAction, help="run eager, no CUDA graphs or compile (default: on on the CPU, vLLM's own on CUDA; the study: on)")
    g.add_argument("--limit-mm-per-prompt", default=None, metavar="JSON", help='inputs per modality, e.g. \'{"image": 0}\' to switch a multimodal checkpoint\'s image input off')
    g.add_argument("--engine-args", default=None, metavar="JSON", help="other vllm.LLM keyword arguments, a JSON object, passed unchanged")
    g.add_argument(
        "--scorer", default="engine", choices=["engine", "twin"],
        help="engine: vLLM's own log-probs and top-20 for every record, one model in memory; twin: an hf copy of the "
        "weights scores each token with the exact entropy (--conventions sleight needs it) (default: engine)",
    )
    g.add_argument("--tensor-parallel-size", type=int, default=1, metavar="N", help="GPUs per model, tensor parallel (default: 1)")
    g.add_argument("--pipeline-parallel-size", type=int, default=1, metavar="N", help="pipeline stages (default: 1)")
    g.add_argument("--max-model-len", type=int, default=None, metavar="N", help="context length vLLM reserves (default: the model's)")
    g.add_argument(
        "--gpu-memory-utilization", type=float, default=None, metavar="F",
        help="CUDA: GPU memory share vLLM takes (default: 0.90, the study's; 0.5 under --scorer twin)",
    )
    g.add_argument(
        "--kv-cache-gib", type=float, default=None, metavar="G",
        help="CPU: GiB of RAM vLLM reserves for its KV cache (default: 2; VLLM_CPU_KVCACHE_SPACE overrides)",
    )


def add_template_args(p: argparse.ArgumentParser, *, where: str = " (recorded)") -> None:
    """``--chat-template-kwargs`` and ``--thinking``: the template variables every render applies
    (read back by ``chat_template_kwargs_from_args``); ``where`` says where they go."""
    p.add_argument(
        "--chat-template-kwargs", default=None, metavar="JSON",
        help=f'variables for the chat template, a JSON object applied to every render{where}, e.g. \'{{"enable_thinking": false}}\'',
    )
    p.add_argument(
        "--thinking", default=None, choices=["on", "off"],
        help="the chat template's enable_thinking (Qwen3 and other hybrid-thinking templates); shorthand for --chat-template-kwargs",
    )


def add_output_args(
    p: argparse.ArgumentParser, default: str | None, *, what: str = "output folder", overwrite: str | None = None
) -> None:
    """``--out`` (and ``--overwrite`` where the command writes a run directory), spelled one way.

    Default folders all live under ``runs/``: ``runs/<model>`` for a tamper run, ``runs/tamper-*`` and
    ``runs/readout-*`` for the other commands."""
    shown = default or "see above"
    p.add_argument("--out", default=default, metavar="DIR", help=f"{what} (default: {shown})")
    if overwrite is not None:
        p.add_argument("--overwrite", action="store_true", help=overwrite)


RESUME = "start --out over when it holds a run (by default a killed run resumes, and a different config is refused)"


def add_progress_arg(p: argparse.ArgumentParser) -> None:
    """One spelling for every long command: bars on a terminal, plain lines in a log, or nothing."""
    p.add_argument("--no-progress", action="store_true", help="no progress display")


def add_limit_arg(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument("--limit", type=int, default=None, metavar="N", help=f"use only the first N {what} (default: all)")


def resolved_dtype(args: argparse.Namespace) -> str:
    """The dtype the flags give: ``--dtype``, else the engine's own default."""
    from sleight.backends import default_dtype

    return getattr(args, "dtype", None) or default_dtype(args.engine)


def chat_template_kwargs_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """The chat-template variables ``--chat-template-kwargs`` and ``--thinking`` give (``{}``: none).

    ``--thinking on|off`` sets ``enable_thinking`` true or false; given with ``--chat-template-kwargs``
    both apply, and an ``enable_thinking`` there that says otherwise is refused in one line."""
    kwargs = _json_object(args, "chat_template_kwargs", example='{"enable_thinking": false}') or {}
    thinking = getattr(args, "thinking", None)
    if thinking is not None:
        want = thinking == "on"
        if "enable_thinking" in kwargs and kwargs["enable_thinking"] != want:
            raise UserError(
                f"--thinking {thinking} conflicts with --chat-template-kwargs enable_thinking={json.dumps(kwargs['enable_thinking'])}; give one"
            )
        kwargs["enable_thinking"] = want
    from sleight.backends.tokens import check_template_kwargs

    return check_template_kwargs(kwargs, "--chat-template-kwargs")


def _json_object(args: argparse.Namespace, name: str, example: str = "") -> dict[str, Any] | None:
    """A flag that takes a JSON object (``None`` when not given); a Namespace built in code (or a
    sweep option) may carry the object itself."""
    raw = getattr(args, name, None)
    if raw is None or isinstance(raw, dict):
        return None if raw is None else dict(raw)
    flag = "--" + name.replace("_", "-")
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise UserError(f"{flag} is not valid JSON ({exc.msg} at column {exc.colno}): {raw}") from None
    if not isinstance(value, dict):
        such = f" such as '{example}'" if example else ""
        raise UserError(f"{flag} must be a JSON object{such}, not {raw}")
    return value


# The ModelSpec fields the model flags give, each read from its flag (``dest``) by this function.
def spec_fields_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """Every :class:`ModelSpec` field the flags give (but ``model``), flag defaults included."""
    device = getattr(args, "device", None)
    return dict(
        engine=args.engine,
        dtype=getattr(args, "dtype", None),
        device=None if device in (None, "auto") else device,
        batch_size=args.batch_size,
        threads=getattr(args, "threads", None),
        chat_template_kwargs=chat_template_kwargs_from_args(args),
        revision=getattr(args, "revision", None),
        quantization=getattr(args, "quantization", None),
        load_format=getattr(args, "load_format", None),
        enforce_eager=getattr(args, "enforce_eager", None),
        limit_mm_per_prompt=_json_object(args, "limit_mm_per_prompt"),
        engine_args=_json_object(args, "engine_args") or {},
        scorer=getattr(args, "scorer", "engine"),
        tensor_parallel_size=getattr(args, "tensor_parallel_size", 1),
        pipeline_parallel_size=getattr(args, "pipeline_parallel_size", 1),
        max_model_len=getattr(args, "max_model_len", None),
        gpu_memory_utilization=getattr(args, "gpu_memory_utilization", None),
        kv_cache_gib=getattr(args, "kv_cache_gib", None),
    )


def model_spec_from_args(args: argparse.Namespace) -> ModelSpec:
    """The :class:`ModelSpec` the flags give, checked (one line naming a bad setting); built once
    and handed to the library, which never sees the flags."""
    if getattr(args, "threads", None) is not None and args.threads < 1:
        raise UserError(f"--threads must be at least 1 (got {args.threads})")
    fields = spec_fields_from_args(args)
    fields["dtype"] = resolved_dtype(args)
    return ModelSpec(args.model, **fields)


def model_from_args(args: argparse.Namespace):
    """Load the model the flags name (the heavy imports happen here, after argument parsing)."""
    from sleight.backends import load_model

    return load_model(model_spec_from_args(args))


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("models", help="list the models usable offline and where each comes from")
    p.set_defaults(func=cmd_models)

    p = sub.add_parser(
        "generate",
        help="answer one question greedily, showing each token's surprisal and top alternatives",
        description="Greedy answer from the model, one line per token: surprisal (nats), entropy, and the top alternatives.",
    )
    p.add_argument("question", nargs="?", default="What is the capital of France?", help="the user turn")
    p.add_argument("--max-new-tokens", type=int, default=48, help="budget of new tokens (default: 48)")
    p.add_argument("--top", type=int, default=5, help="alternatives shown per token (default: 5)")
    add_model_args(p)
    p.set_defaults(func=cmd_generate)

    from sleight.cli import demo

    demo.register(sub)  # its own module: sleight/cli/demo.py


def cmd_models(args: argparse.Namespace) -> int:
    from sleight.backends import list_offline_models

    rows = list_offline_models()
    print(f"{'name':<28} {'available':<40} source")
    for r in rows:
        print(f"{r['name']:<28} {r['available']:<40} {r['source']}")
    print("\nAlso accepted by --model: a Hugging Face folder, a .gguf file, or a hub id (needs the hub or its local cache).")
    print("Engines: hf (CPU/CUDA, default), vllm (GPU; pip install vllm). Judges also take openai:<base_url>#<model>.")
    return 0


def cmd_generate(args: argparse.Namespace) -> int:
    if args.max_new_tokens < 1:
        raise UserError(f"--max-new-tokens must be at least 1 (got {args.max_new_tokens})")
    if args.top < 0:
        raise UserError(f"--top must be 0 or more (got {args.top})")
    if args.model.startswith("openai:"):
        return _generate_remote(args)
    model = model_from_args(args)
    rendered = model.render_chat([{"role": "user", "content": args.question}])
    gen = model.greedy([rendered.ids], args.max_new_tokens, top_k=max(args.top, 1))[0]
    print(f"model: {model.info.model_id} ({model.info.engine}, {model.info.device})")
    print(f"prompt: {rendered.text!r}")
    print(f"answer: {model.decode(gen.token_ids)}\n")
    print(f"{'#':>3} {'token':<16} {'surprisal':>9} {'entropy':>8}  top alternatives (prob)")
    for i, tok in enumerate(gen.token_ids):
        alts = ", ".join(
            f"{model.token_text(int(t))!r} {math.exp(float(lp)):.2f}" for t, lp in zip(gen.top_ids[i][: args.top], gen.top_logprobs[i][: args.top])
        )
        print(f"{i:>3} {model.token_text(tok)!r:<16} {-gen.logprobs[i]:>9.3f} {gen.entropy[i]:>8.3f}  {alts}")
    print(f"\nmean surprisal {float(gen.surprisal.mean()):.3f} nats over {len(gen.token_ids)} tokens ({gen.finish_reason})")
    return 0


def _generate_remote(args: argparse.Namespace) -> int:
    """The same answer from an OpenAI-compatible endpoint; per-token detail where it serves logprobs."""
    from sleight.backends.chat import load_chat

    chat = load_chat(args.model, logprobs=True)
    reply = chat.chat_many([[{"role": "user", "content": args.question}]], max_tokens=args.max_new_tokens)[0]
    if reply.error:
        from sleight.errors import UserError

        raise UserError(f"endpoint {args.model} failed: {reply.error}")
    print(f"model: {args.model}")
    print(f"answer: {reply.text}\n")
    if not reply.logprobs:
        print("(the endpoint returned no logprobs)")
        return 0
    print(f"{'#':>3} {'token':<16} {'surprisal':>9}  top alternatives (prob)")
    for i, entry in enumerate(reply.logprobs):
        alts = ", ".join(f"{a['token']!r} {math.exp(a['logprob']):.2f}" for a in (entry.get("top_logprobs") or [])[: args.top])
        print(f"{i:>3} {entry['token']!r:<16} {-entry['logprob']:>9.3f}  {alts}")
    return 0
