"""Subcommands shared by both instruments: ``models``, ``generate`` and ``demo``; shared flags."""

from __future__ import annotations

import argparse
import math

from sleight.backends import DEFAULT_MODEL, ENGINES


def add_model_args(p: argparse.ArgumentParser, *, batch_size: int = 128) -> None:
    """The flags every model-using command shares."""
    p.add_argument("--model", default=DEFAULT_MODEL, help=f"model name, folder, .gguf file or hub id (default: {DEFAULT_MODEL})")
    p.add_argument("--engine", default="hf", choices=ENGINES, help="inference engine (default: hf)")
    p.add_argument("--device", default="auto", help="cpu, cuda, cuda:1 ... (default: cuda if available)")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"], help="weights dtype (default: float32)")
    p.add_argument("--batch-size", type=int, default=batch_size, help=f"rows per forward pass (default: {batch_size})")
    p.add_argument("--tensor-parallel-size", type=int, default=1, help="vllm only: GPUs per model (default: 1)")


def model_from_args(args: argparse.Namespace):
    """Load the model the flags name (the heavy imports happen here, after argument parsing)."""
    from sleight.backends import load_model

    extra = {"tensor_parallel_size": args.tensor_parallel_size} if args.engine == "vllm" else {}
    return load_model(args.model, engine=args.engine, device=args.device, dtype=args.dtype, batch_size=args.batch_size, **extra)


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

    p = sub.add_parser(
        "demo",
        help="run both instruments end to end on the bundled model (small sizes)",
        description="A small tamper sweep judged by a jury of one and reported, then a readout audit, the forecast "
        "pipeline and the P(True) readouts, all on the bundled default model. Rerunning resumes the tamper sweep.",
    )
    p.add_argument("--out", default="runs/demo", help="output folder (default: runs/demo)")
    p.add_argument("--questions", type=int, default=3, help="tamper questions (default: 3)")
    p.add_argument("--substitutes", type=int, default=6, help="substitutes per question, 'Mandela effect' first (default: 6)")
    p.add_argument("--max-new-tokens", type=int, default=96, help="tamper budget per reply (default: 96; the benchmark uses 256)")
    p.add_argument("--items", type=int, default=6, help="readout items per step (default: 6)")
    p.set_defaults(func=cmd_demo)


DEMO_STEPS = (
    ("A greedy answer, token by token", ["generate", "--max-new-tokens", "24"]),
    (
        "Sleight of Word: a small sweep",
        ["tamper", "run", "--questions", "{questions}", "--substitutes", "{substitutes}", "--max-new-tokens", "{max_new_tokens}", "--out", "{out}/tamper/run"],
    ),
    ("The jury (the default model alone: a jury of one)", ["tamper", "judge", "--run", "{out}/tamper/run", "--jury", DEFAULT_MODEL, "--max-tokens", "64"]),
    ("Leaderboard, plots and site", ["tamper", "report", "{out}/tamper/run", "--out", "{out}/tamper/report"]),
    ("Readout audit of the reader-forecast prompt", ["readout", "audit", "--preset", "forecast", "--limit", "{items}", "--variants", "original,space,stem,deleted_instruction", "--overwrite", "--out", "{out}/readout/audit"]),
    ("Does the forecast rank the reader's correctness?", ["readout", "forecast", "--limit", "{items}", "--out", "{out}/readout/forecast"]),
    ("P(True): five readouts of one prompt", ["readout", "ptrue", "--limit", "{items}", "--out", "{out}/readout/ptrue"]),
)


def cmd_demo(args: argparse.Namespace) -> int:
    """Both instruments end to end on the bundled model, small enough for a laptop CPU."""
    from sleight.cli.main import main

    fill = {k: str(v) for k, v in vars(args).items()}
    for i, (title, argv) in enumerate(DEMO_STEPS, 1):
        argv = [a.format(**fill) for a in argv]
        print(f"\n=== [{i}/{len(DEMO_STEPS)}] {title}\n$ sleight {' '.join(argv)}", flush=True)
        code = main(argv)
        if code:
            return code
    print(f"\nDone. Open {args.out}/tamper/report/index.html (or: sleight tamper view {args.out}/tamper/report),")
    print(f"{args.out}/tamper/report/leaderboard.md, {args.out}/readout/audit/report.md, {args.out}/readout/forecast/report.md and {args.out}/readout/ptrue/report.md.")
    return 0


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
