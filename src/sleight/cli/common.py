"""Subcommands shared by both instruments (``models``, ``generate``; ``demo`` registers from its own
module), the flags every model-using command shares, and the output check every writing command
makes before it loads anything."""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Callable, Sequence
from typing import Any

from sleight.backends import DEFAULT_MODEL, default_dtype
from sleight.backends.spec import ModelSpec, options, served
from sleight.errors import UserError
from sleight.paths import check_writable  # noqa: F401  (re-exported: every writing command checks its output)


def add_model_args(p: argparse.ArgumentParser, *, batch_size: int = 128, model: bool = True) -> None:
    """The flags every model-using command shares, one per :class:`ModelSpec` field that has one
    (name, type, choices and help from the spec's own :func:`~sleight.backends.spec.options`);
    ``model=False``: all but ``--model``, for a command that takes several models. Every flag
    defaults to ``None`` (the spec's own default), so what a command line set is what is not None."""
    vllm = p.add_argument_group("vllm engine (passed through to vllm.LLM)")
    for name, opt in options():
        if opt.flag is None or (name == "model" and not model):
            continue
        where = vllm if opt.vllm else p
        kw: dict[str, Any] = {"dest": name, "default": None, "help": opt.help, "metavar": opt.metavar}
        if name == "model":  # always a model: the bundled one by default
            kw.update(default=DEFAULT_MODEL, help=f"{opt.help} (default: {DEFAULT_MODEL})")
        elif name == "batch_size":
            kw["help"] = f"{opt.help} (default: {batch_size})"
        if opt.kind is bool:
            kw["action"] = argparse.BooleanOptionalAction
        elif opt.choices:
            kw["choices"] = list(opt.choices)
        elif not opt.json:
            kw["type"] = float if opt.kind == (int, float) else opt.kind
        where.add_argument(opt.flag, **kw)
    p.add_argument("--thinking", default=None, choices=["on", "off"], help=THINKING_HELP)
    p.set_defaults(model_defaults={"model": DEFAULT_MODEL, "batch_size": batch_size})


THINKING_HELP = "the chat template's enable_thinking (Qwen3 and other hybrid-thinking templates); shorthand for --chat-template-kwargs"


def add_template_args(p: argparse.ArgumentParser, *, where: str = " (recorded)") -> None:
    """``--chat-template-kwargs`` and ``--thinking``: the template variables every render applies
    (read back by ``chat_template_kwargs_from_args``); ``where`` says where they go."""
    p.add_argument(
        "--chat-template-kwargs", default=None, metavar="JSON",
        help=f'variables for the chat template, a JSON object applied to every render{where}, e.g. \'{{"enable_thinking": false}}\'',
    )
    p.add_argument("--thinking", default=None, choices=["on", "off"], help=THINKING_HELP)


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


def add_command_group(
    sub: argparse._SubParsersAction, name: str, *, help: str, description: str,
    members: Sequence[Callable[[argparse._SubParsersAction], None]],
) -> None:
    """``sleight NAME SUBCOMMAND``: an instrument's command group, each member module's ``register``
    adding its subcommands (the one chosen lands in ``args.NAME_command``)."""
    p = sub.add_parser(name, help=help, description=description)
    group = p.add_subparsers(dest=f"{name}_command", metavar="SUBCOMMAND", required=True)
    for register in members:
        register(group)


RESUME = "start --out over when it holds a run (by default a killed run resumes, and a different config is refused)"


def add_progress_arg(p: argparse.ArgumentParser) -> None:
    """One spelling for every long command: bars on a terminal, plain lines in a log, or nothing."""
    p.add_argument("--no-progress", action="store_true", help="no progress display")


def add_limit_arg(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument("--limit", type=int, default=None, metavar="N", help=f"use only the first N {what} (default: all)")


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


def spec_fields_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """The :class:`ModelSpec` fields this command line set (but ``model``), by field name: the flags
    that are not None, JSON objects parsed, ``--thinking`` merged into the template variables. A
    sweep takes these as overrides of its file; a single run adds the command's defaults."""
    out: dict[str, Any] = {}
    for name, opt in options():
        if name == "model" or opt.flag is None or not hasattr(args, name):
            continue
        value = _json_object(args, name) if opt.json and name != "chat_template_kwargs" else getattr(args, name)
        if value is not None:
            out[name] = value
    template = chat_template_kwargs_from_args(args)
    if template:
        out["chat_template_kwargs"] = template
    if out.get("device") == "auto":
        del out["device"]
    return out


def model_spec_from_args(args: argparse.Namespace, model: str | None = None, *, resolve_dtype: bool = True) -> ModelSpec:
    """The :class:`ModelSpec` the flags give (``model``: instead of ``--model``), checked by the spec
    itself (one line naming a bad setting); built once and handed to the library, which never sees
    the flags. The dtype is resolved here (the engine's default when none is given), so the run's
    manifest records the one it ran with; ``resolve_dtype=False`` leaves it None when not given (a
    table of ``reproduce`` pins its own)."""
    defaults = dict(getattr(args, "model_defaults", None) or {"model": DEFAULT_MODEL, "batch_size": 128})
    fields = {**{k: v for k, v in defaults.items() if k != "model"}, **spec_fields_from_args(args)}
    name = model or getattr(args, "model", None) or defaults["model"]
    if resolve_dtype and not served(name):  # a served model's dtype is its server's
        fields["dtype"] = fields.get("dtype") or default_dtype(fields.get("engine", "hf"))
    return ModelSpec(name, **fields)


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
