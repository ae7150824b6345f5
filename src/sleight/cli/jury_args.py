"""The flags every judge command shares (``tamper judge``, ``readout judge``), spelled one way."""

from __future__ import annotations

import argparse
import json
from typing import Any

from sleight.backends import ENGINES
from sleight.cli.common import add_template_args, chat_template_kwargs_from_args


def add_jury_args(p: argparse.ArgumentParser, *, max_tokens: int | None, vote_auto: str | None = None) -> None:
    """The shared judge flags. ``max_tokens`` ``None``: the budget follows the conventions (said in
    the help); ``vote_auto``: what ``--vote auto`` means, when the command says it otherwise."""
    p.add_argument(
        "--jury",
        required=True,
        help="comma-separated judge specs: local model names/paths (on --engine) or openai:<base_url>#<model> "
        "(key from $OPENAI_API_KEY or --api-key-env)",
    )
    p.add_argument(
        "--vote",
        default="auto",
        choices=["auto", "slots", "schema", "text"],
        help="how jurors vote: slots (a local model's probabilities of the allowed values at each field's value in a "
        "prefilled JSON), schema (a server's JSON-schema response_format, falling back to text), text (free reply, "
        f"parsed); auto = {vote_auto or 'slots on local jurors, schema on servers'} (default: auto)",
    )
    budget = "256 under the study's conventions, 200 under sleight's" if max_tokens is None else str(max_tokens)
    p.add_argument("--max-new-tokens", type=int, default=max_tokens, metavar="N", help=f"reply budget per vote on the schema and text paths (default: {budget})")
    p.add_argument("--batch-size", type=int, default=16, metavar="N", help="votes committed to disk at a time, and a local juror's rows per forward pass (default: 16)")
    p.add_argument("--limit", type=int, default=None, metavar="N", help="ask each juror about at most N pending cases now (a quick look; default: all)")
    p.add_argument("--concurrency", type=int, default=8, help="requests in flight per server juror (default: 8)")
    p.add_argument("--api-key-env", default="OPENAI_API_KEY", help="environment variable holding the endpoint key (default: OPENAI_API_KEY)")
    p.add_argument("--engine", default="hf", choices=ENGINES, help="engine for local judges (default: hf)")
    p.add_argument("--device", default="auto", help="device for local judges (default: auto)")
    add_template_args(p, where=" of every juror (a server juror gets them as the request's chat_template_kwargs)")
    p.add_argument(
        "--juror-chat-template-kwargs", action="append", default=[], metavar="JUROR=JSON",
        help="chat-template variables of one juror (repeatable), over those every juror gets, e.g. "
        "'Qwen/Qwen3.6-27B={\"enable_thinking\": false}' as the study asked its Qwen3.6 juror; recorded with the votes",
    )


def juror_template_kwargs(args: argparse.Namespace, jurors: list[str]) -> dict[str, dict[str, Any]]:
    """Each juror's chat-template variables: ``--chat-template-kwargs``/``--thinking`` for all, then
    its own ``--juror-chat-template-kwargs JUROR=JSON`` over them."""
    from sleight.backends.tokens import check_template_kwargs
    from sleight.errors import UserError

    shared = chat_template_kwargs_from_args(args)
    out = {j: dict(shared) for j in jurors}
    for item in getattr(args, "juror_chat_template_kwargs", None) or []:
        spec, sep, raw = str(item).partition("={")  # the object's brace ends the juror's spec
        raw = "{" + raw
        if not sep or spec not in out:
            raise UserError(f"--juror-chat-template-kwargs {item}: give JUROR=JSON with JUROR one of --jury ({', '.join(jurors)})")
        try:
            value = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise UserError(f"--juror-chat-template-kwargs {item}: not valid JSON ({exc.msg})") from None
        out[spec].update(check_template_kwargs(value, f"--juror-chat-template-kwargs {spec}"))
    return out


def loader_from_args(args: argparse.Namespace) -> Any:
    """``spec -> judge``: a checked server client, or a local model on the flags' engine and device,
    each with its own chat-template variables (:func:`juror_template_kwargs`)."""
    from sleight.jury.jurors import parse_jury

    device = None if args.device == "auto" else args.device
    per_juror = juror_template_kwargs(args, parse_jury(args.jury))

    def loader(spec: str) -> Any:
        from sleight.backends.chat import LocalChat, load_chat

        template_kwargs = per_juror.get(spec, {})
        if spec.startswith("openai:"):
            return load_chat(spec, concurrency=args.concurrency, api_key_env=args.api_key_env, chat_template_kwargs=template_kwargs)
        from sleight.backends import load_model

        return LocalChat(
            load_model(spec, engine=args.engine, device=device, batch_size=max(args.batch_size, 1), chat_template_kwargs=template_kwargs)
        )

    return loader
