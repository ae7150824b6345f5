"""A sweep file's jury: each judge loaded from its own spec (or an endpoint's client), then every
subject's run judged (:mod:`sleight.tamper.jury.run`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sleight.errors import UserError
from sleight.tamper.sweep.config import Jury
from sleight.tamper.sweep.plan import Plan


def judge_loader(jury: Jury, batch_size: int) -> Callable[[str], Any]:
    """``juror -> judge`` for a file's jury: an endpoint's checked client, or a local model loaded
    from its own spec (engine, quantization, memory share, chat-template arguments as the file sets)."""
    by_spec = {j.juror: j for j in jury.judges}

    def load(spec: str) -> Any:
        from sleight.backends import load_model
        from sleight.backends.chat import LocalChat, load_chat

        j = by_spec[spec]
        if j.endpoint:
            return load_chat(spec, concurrency=jury.concurrency, api_key_env=jury.api_key_env,
                             chat_template_kwargs=dict(j.spec.chat_template_kwargs))  # fmt: skip
        device = None if jury.device == "auto" else jury.device
        return LocalChat(load_model(j.spec.with_(device=device, batch_size=max(batch_size, 1))))

    return load


def judge(plan: Plan, prompt_file: Any, *, progress: bool, echo: Callable[[str], None]) -> None:
    """The file's jury over every subject's run directory, read by the run's conventions' rules,
    each juror with its own chat-template arguments (recorded; a resume with others is refused)."""
    from sleight.tamper.jury.run import judge_runs, no_vote_line, summary_lines

    jury = plan.config.jury
    assert jury is not None
    summary = judge_runs(
        plan.run_dirs,
        [j.juror for j in jury.judges],
        variant=jury.prompt,
        prompt_file=prompt_file.path if prompt_file is not None else None,
        vote=jury.vote,
        max_tokens=jury.max_new_tokens,
        batch=jury.batch_size,
        loader=judge_loader(jury, jury.batch_size),
        progress=progress,
        conventions=plan.tasks[0].job.trials.conventions if plan.tasks else None,
        template_kwargs={j.juror: dict(j.spec.chat_template_kwargs) for j in jury.judges},
    )
    for line in summary_lines(summary):
        echo(line)
    if summary.asked and not summary.cast:
        raise UserError(no_vote_line(summary))
