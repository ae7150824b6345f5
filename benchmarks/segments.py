"""What a ragged batch's segments cost: the engine's unhooked rate with the same live rows held as
few or many segments (issue 28).

    python benchmarks/segments.py                              # 202 rows as requests of 101, 16 and 8, 64 steps
    python benchmarks/segments.py --rows 32 --requests 16,4 --steps 8   # smoke, seconds

Each request is its own question's prompt (cycled over the first 20 questions), so it is a segment
of its own with its own shared prefix; ``--requests`` gives the rows a request. Every row decodes for
``--steps`` steps (end-of-sequence ignored), as ``benchmarks/sweep.py``'s full-batch reference does.
Printed per request size: tok/s and the live and masked key columns attention read a step.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
import sleight  # noqa: E402,F401  its OpenMP settings, before torch loads (sleight/__init__.py)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--rows", type=int, default=202)
    ap.add_argument("--requests", default="101,16,8", help="rows a request, comma-separated (default: 101,16,8)")
    ap.add_argument("--steps", type=int, default=64)
    args = ap.parse_args(argv)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from sleight.backends import load_model
    from sleight.tamper.data import load_questions
    from sleight.tamper.engine import render_question
    from sweep import full_batch_rate

    model = load_model(args.model)
    prompts = [render_question(model, q.question).ids for q in load_questions()[0][:20]]
    for per in (int(x) for x in args.requests.split(",")):
        rate, live, masked = full_batch_rate(model, prompts, args.rows, per, args.steps)
        print(f"{args.rows} rows in requests of {per} ({-(-args.rows // per)} segments): {rate:.1f} tok/s; "
              f"{live:.0f} live, {masked:.0f} masked columns a step", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
