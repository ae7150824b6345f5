"""The naive Sleight of Word algorithm, one trial at a time: the yardstick for the engine (SPEC §6).

Generate the reply to the budget, find the first trigger, cut there, splice the substitute,
regenerate everything after it, and repeat until no trigger is left (the study's phase-1 loop).
Under the study's conventions a reply the model ended keeps its end-of-turn token (the argmax end
id, read with :meth:`read_next`) and a substitute may end past the budget. It uses plain unhooked
``greedy`` calls and throws away every token generated past a trigger, which is what the engine
avoids. Its trials must match the engine's token for token (same detector, same splice).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sleight.backends.base import LanguageModel, Rendered
from sleight.tamper.engine import Substitution, TamperConfig, plan_substitution


@dataclass
class ReferenceTrial:
    token_ids: list[int]
    injected: list[bool]
    finish_reason: str
    substitutions: list[Substitution] = field(default_factory=list)
    decoded: int = 0  # tokens generated, including all that were thrown away


def reference_trial(model: LanguageModel, rendered: Rendered, substitute: str, config: TamperConfig) -> ReferenceTrial:
    """One trial by generate-cut-splice-regenerate."""
    reply: list[int] = []
    flags: list[bool] = []
    out = ReferenceTrial([], [], "length")
    find = config.finder()
    while True:
        room = config.max_new_tokens - len(reply)
        if room <= 0:
            out.finish_reason = "length"
            break
        gen = model.greedy([list(rendered.ids) + reply], room, top_k=config.top_k)[0]
        out.decoded += len(gen.token_ids)
        full = reply + list(gen.token_ids)
        full_flags = flags + [False] * len(gen.token_ids)
        trig = None
        for i in range(len(reply) + 1, len(full) + 1):
            trig = find(full[:i], full[i] if i < len(full) else None, model.decode, config.trigger, full_flags)
            if trig is not None:
                break
        if trig is None:
            reply, flags = full, full_flags
            out.finish_reason = gen.finish_reason
            if config.study and gen.finish_reason == "stop":
                end = int(model.read_next([list(rendered.ids) + reply], [[]], top_k=1)[0].top_ids[0])
                reply, flags = reply + [end], flags + [False]
            break
        sub = plan_substitution(full, trig, substitute, model, config)
        reply = full[: trig.start] + list(sub.ids)
        flags = full_flags[: trig.start] + [True] * len(sub.ids)
        out.substitutions.append(sub)
    out.token_ids, out.injected = reply, flags
    return out
