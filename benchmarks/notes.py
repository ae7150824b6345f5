"""App. H's note writer: seconds and sequential decode steps for the notes of the first RACE-h passages.

Run:  python benchmarks/notes.py [--passages 2] [--words 32] [--one-at-a-time]

``write_notes`` runs the first attempts as one batch and the four retries of the passages left as a
second. ``--one-at-a-time`` also times the writer as App. H words it (each attempt asked only after
the one before failed, batched per attempt over the passages left) on the same passages, and checks
that both keep the same notes.
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--passages", type=int, default=2, help="RACE-h fixture passages (default: 2)")
    parser.add_argument("--words", type=int, default=32, help="the note budget (default: 32; N1: 12)")
    parser.add_argument("--one-at-a-time", action="store_true", help="also time one attempt at a time")
    parser.add_argument("--model", default="smollm2-135m-instruct")
    args = parser.parse_args()

    from sleight.backends import LanguageModel, load_model
    from sleight.readout.audit.notes import NOTE_MAX_NEW_TOKENS, NOTE_RETRIES, Note, note_ok, write_notes, writer_prompt
    from sleight.readout.data import load_data
    from sleight.readout.data.fixtures import fixtures_dir

    def one_at_a_time(model: LanguageModel, passages: list[str], steps: list[int]) -> list[Note]:
        notes = [Note("", 0, False, "", 0, "") for _ in passages]
        todo = list(range(len(passages)))
        for retry in range(NOTE_RETRIES + 1):
            if not todo:
                break
            prompts = [model.render_chat([{"role": "user", "content": writer_prompt(passages[i], retry, args.words)}]).ids for i in todo]
            outs = model.generate_until(prompts, NOTE_MAX_NEW_TOKENS, progress=steps.append)
            for i, out in zip(todo, outs):
                raw = model.decode(out.token_ids).strip()
                ok = note_ok(raw, out.finish_reason, args.words)
                notes[i] = Note(raw if ok else "", retry + 1, ok, raw, len(out.token_ids), out.finish_reason)
            todo = [i for i in todo if not notes[i].ok]
        return notes

    spec = f"race-h:{fixtures_dir()}/ehovy/race/high/test-00000-of-00001.parquet"
    passages = [str(r.get("passage") or "") for r in load_data(spec).records[: args.passages]]
    model = load_model(args.model)
    ways = [("together", lambda steps: write_notes(model, passages, words=args.words, progress=steps.append))]
    if args.one_at_a_time:
        ways.append(("one at a time", lambda steps: one_at_a_time(model, passages, steps)))
    kept = []
    for name, run in ways:
        steps: list[int] = []
        t0 = time.perf_counter()
        notes = run(steps)
        dt = time.perf_counter() - t0
        kept.append([(n.text, n.attempts, n.ok) for n in notes])
        print(f"{name:14s} {dt:7.1f} s  {len(steps):5d} decode steps  {sum(steps):6d} tokens  "
              f"kept {sum(n.ok for n in notes)}/{len(notes)}  attempts {[n.attempts for n in notes]}")  # fmt: skip
    if len(kept) == 2:
        print("same notes:", kept[0] == kept[1])


if __name__ == "__main__":
    main()
