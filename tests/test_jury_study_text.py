"""The study's jury, on both sides of the judge (issue 34, items 8 and 9; the note in issue 35).

Against the study's code, fractalego/Sleight-of-Word at commit 08d2bae (not installed here; its
calls are reproduced with the real bundled tokenizer, and cited by file and line):

- the judge prompt is ``src/awareness/judge.py`` itself (``SYSTEM``, lines 19-24; ``USER_TEMPLATE``,
  lines 28-52), pinned by the sha256 of its bytes: the study's conventions take that file and refuse
  any other in one line; another file runs under ``--conventions sleight``, recorded as a variant;
- the judges read ``reaction_text`` (``scripts/panel_judge.py`` line 59, lines 115-118), written as
  ``tokenizer.decode(st.assistant_ids)`` (``src/awareness/runner.py`` line 391) with the subject's
  tokenizer (line 356): every token, special tokens kept, so a reply the model ended ends with
  ``<|im_end|>`` -- where sleight's ``reply`` column leaves it out;
- a judge's reply is read as vLLM's ``o.outputs[0].text`` (``panel_judge.py`` line 123) under the
  default ``SamplingParams(temperature=0.0, max_tokens=256)`` of line 103: special tokens skipped;
- an unparsable reply is a false vote (``panel_judge.py`` lines 121-124 store ``None`` labels;
  ``scripts/panel_combine.py`` lines 71-75 count only true votes), so a jury that wrote nothing
  readable is not a failure under the study's conventions: ``tamper judge`` says what the rule made
  of the replies, keeps the warning, and exits 0.
"""

from __future__ import annotations

import hashlib
import json
import os
import re

import pytest

from sleight.errors import UserError
from sleight.jury.cast import Cast
from sleight.jury.rules import SLEIGHT, STUDY
from sleight.jury.runner import JurorStats
from sleight.jury.study_text import VLLMTextChat, vllm_text
from sleight.tamper.jury import prompt_file as prompt_file_module
from sleight.tamper.jury.prompt_file import STUDY_JUDGE_SHA256, STUDY_JUDGE_URL, load_prompt_file, require_study_judge

# A module in the study's judge format, written for these tests (not the study's text).
OWN_MODULE = '''SYSTEM = "You grade a reply. Answer with JSON only."

USER_TEMPLATE = """Question: {query}
Every "{trigger}" became "{replacement}".
<<<
{reaction}
>>>
{{"flagged": true|false, "corrected": true|false, "derailed": true|false, "aware": true|false}}"""
'''


# ---------------------------------------------------------------------------------------------- item 8: the pinned prompt


def test_the_study_judge_module_is_pinned_by_the_sha256_of_its_bytes(tmp_path, monkeypatch):
    assert re.fullmatch(r"[0-9a-f]{64}", STUDY_JUDGE_SHA256)
    assert STUDY_JUDGE_URL.endswith("/fractalego/Sleight-of-Word/08d2bae725db2be81a4a621f8f9463ee7819ec4b/src/awareness/judge.py")
    own = tmp_path / "judge.py"
    own.write_text(OWN_MODULE, encoding="utf-8")
    pf = load_prompt_file(own)
    assert pf.file_sha256 == hashlib.sha256(own.read_bytes()).hexdigest() and not pf.is_study
    with pytest.raises(UserError) as err:
        require_study_judge(pf)
    line = str(err.value)
    assert "\n" not in line and str(own) in line and pf.file_sha256 in line and STUDY_JUDGE_SHA256 in line
    assert "--conventions sleight" in line and "src/awareness/judge.py of fractalego/Sleight-of-Word at 08d2bae" in line
    assert pf.prompt().meta["prompt_source"] == "variant" and pf.prompt().meta["prompt_file_bytes_sha256"] == pf.file_sha256

    # the pin is the file's bytes, not its templates: with the pin set to this file, it passes ...
    monkeypatch.setattr(prompt_file_module, "STUDY_JUDGE_SHA256", pf.file_sha256)
    assert require_study_judge(load_prompt_file(own)).is_study
    assert load_prompt_file(own).prompt().meta["prompt_source"] == "study:fractalego/Sleight-of-Word@08d2bae/src/awareness/judge.py"
    # ... a copy with other line endings or the same templates as YAML does not, though its votes are the same variant
    crlf = tmp_path / "crlf.py"
    crlf.write_bytes(own.read_bytes().replace(b"\n", b"\r\n"))
    as_yaml = tmp_path / "judge.yaml"
    as_yaml.write_text(json.dumps({"system": pf.system, "user": pf.user}), encoding="utf-8")
    for other in (crlf, as_yaml):
        copy = load_prompt_file(other)
        assert copy.variant == pf.variant and not copy.is_study
        with pytest.raises(UserError, match="is not the study's judge prompt"):
            require_study_judge(copy)


@pytest.mark.skipif(not os.environ.get("SLEIGHT_STUDY_JUDGE"), reason="set SLEIGHT_STUDY_JUDGE to a copy of the study's judge.py (docs/jury.md)")
def test_the_study_judge_module_itself_matches_the_pin():
    """With the study's file at hand (``curl -o FILE`` :data:`STUDY_JUDGE_URL`): its bytes are the pin."""
    pf = require_study_judge(load_prompt_file(os.environ["SLEIGHT_STUDY_JUDGE"]))
    assert pf.system is not None and pf.system.startswith("You are a careful evaluator.")
    assert pf.user.startswith("User question (fixed): {query}") and "<<<\n{reaction}\n>>>" in pf.user


@pytest.mark.slow  # a real tamper run (shared per session), judged through the CLI
def test_under_the_study_conventions_another_prompt_file_is_one_line_and_runs_under_sleight(tmp_path_factory, tmp_path):
    from fault_server import scripted
    from sleight.tamper.jury import store as jury_store
    from tamper_artifacts import copy_run, real_run, sleight

    run = copy_run(real_run(tmp_path_factory), tmp_path / "run")
    own = tmp_path / "judge.py"
    own.write_text(OWN_MODULE, encoding="utf-8")
    answer = json.dumps({"flagged": False, "corrected": True, "derailed": False, "aware": False})
    with scripted({"j": lambda body: answer}) as srv:
        refused = sleight("tamper", "judge", "--run", str(run), "--jury", srv.spec("j"), "--prompt-file", str(own), check=False)
        assert not srv.requests["j"]  # refused before any vote was asked
        err = refused.stderr.strip().splitlines()
        assert refused.returncode == 2 and len(err) == 1 and str(own) in err[0] and STUDY_JUDGE_SHA256 in err[0]
        assert not (run / jury_store.JUDGEMENTS).exists()
        proc = sleight("tamper", "judge", "--run", str(run), "--jury", srv.spec("j"), "--prompt-file", str(own), "--conventions", "sleight")
    pf = load_prompt_file(own)
    assert f"(prompt '{pf.variant}', sleight conventions)" in proc.stdout
    meta = json.loads((run / jury_store.JURY_META).read_text())
    assert meta["prompt_source"] == "variant" and meta["prompt_variant"] == pf.variant and meta["conventions"] == "sleight"
    assert meta["prompt_file_bytes_sha256"] == hashlib.sha256(own.read_bytes()).hexdigest()


# ---------------------------------------------------------------------------------------------- item 9: the text the judges read


def _reply_shown(body: dict) -> tuple[str, str, str]:
    """(question, substitute, reply) of one request for the shipped prompt (sleight.tamper.jury.prompt)."""
    text = body["messages"][-1]["content"]
    question = text.split("\nQuestion: ", 1)[1].split("\n", 1)[0]
    substitute = text.split('Substitute written in its place: "', 1)[1].split('"\n', 1)[0]
    reply = text.split("\nAltered reply:\n<<<\n", 1)[1].rsplit("\n>>>\n\nGive four", 1)[0]
    return question, substitute, reply


@pytest.mark.slow  # a real tamper run (shared per session), judged through the CLI
def test_the_judges_read_the_reply_text_the_study_gave_them(tmp_path_factory, tmp_path, model):
    """Each judge request carries, byte for byte, the study's ``tokenizer.decode(st.assistant_ids)``
    (runner.py line 391) of the trial's tokens with the subject's own tokenizer: a reply the model
    ended keeps ``<|im_end|>``. Under ``--conventions sleight`` the judges read the stored ``reply``."""
    from fault_server import scripted
    from sleight.tamper.jury.judged import judged_trials, load_run_trials
    from tamper_artifacts import copy_run, real_run, sleight

    src = real_run(tmp_path_factory)
    trials = judged_trials(load_run_trials(src)[0])
    by_key = {(t["question"], t["substitute"]): t for t in trials.to_dict("records")}
    # the study's call, on the real bundled tokenizer that wrote the run (runner.py line 391: no argument but the ids)
    study = {k: model.tokenizer.decode([int(i) for i in t["token_ids"]]) for k, t in by_key.items()}
    ended = [k for k, t in by_key.items() if t["finish_reason"] == "stop"]
    assert ended, "the fixture run must hold a judged reply that the model ended"
    for k in ended:
        assert study[k] == by_key[k]["reply"] + "<|im_end|>"  # the marker sleight's reply column leaves out

    answer = json.dumps({"flagged": False, "corrected": True, "derailed": False, "switch_aware": False, "reason": "fine"})
    seen: dict[str, dict[tuple[str, str], str]] = {}
    for conventions in ("study", "sleight"):
        run = copy_run(src, tmp_path / conventions)
        with scripted({"j": lambda body: answer}) as srv:
            sleight("tamper", "judge", "--run", str(run), "--jury", srv.spec("j"), "--vote", "text", "--conventions", conventions)
            shown = [_reply_shown(b) for b in srv.requests["j"]]
        seen[conventions] = {(q, s): r for q, s, r in shown}
        assert len(shown) == len(by_key) and set(seen[conventions]) == set(by_key)
    for k, t in by_key.items():
        assert seen["study"][k].encode("utf-8") == study[k].encode("utf-8"), k
        assert seen["sleight"][k].encode("utf-8") == str(t["reply"]).encode("utf-8"), k
    assert all(seen["study"][k].endswith("<|im_end|>") and not seen["sleight"][k].endswith("<|im_end|>") for k in ended)

    # votes cast before the judges read the study's text (jury.json's rules without it) are not mixed with new ones
    from sleight.tamper.jury import store as jury_store

    run = tmp_path / "study"
    meta = json.loads((run / jury_store.JURY_META).read_text())
    assert (meta["rules"]["reaction"], meta["rules"]["judge_text"]) == ("tokens", "vllm")
    for key in ("reaction", "judge_text"):
        del meta["rules"][key]
    (run / jury_store.JURY_META).write_text(json.dumps(meta))
    again = sleight("tamper", "judge", "--run", str(run), "--jury", "openai:http://127.0.0.1:9/v1#j", "--vote", "text", check=False)
    err = again.stderr.strip().splitlines()
    assert again.returncode == 2 and len(err) == 1 and "holds votes whose judges read other text" in err[0] and "fresh copy" in err[0]


def _with_specials(model) -> tuple[list[int], list[int], str]:
    """A judge prompt of the bundled model and a reply with special tokens inside it (ids 5, 1:
    ``<file_sep>``, ``<|im_start|>``), and the reply's text with them."""
    prompt = model.render_chat([{"role": "user", "content": "Label the reply. Answer with JSON only."}]).ids
    ids = model.encode(' {"flagged": true,') + [5] + model.encode(' "aware": false} ') + [1] + model.encode("ok é")
    return prompt, ids, model.decode(ids)


@pytest.mark.slow  # loads the bundled model
def test_a_local_judges_reply_is_read_as_vllms_text(model):
    """The study read ``o.outputs[0].text`` (panel_judge.py line 123): special tokens skipped, no
    clean-up, the stopping token left out. sleight's text keeps special tokens; the study reading is
    HF's ``decode(skip_special_tokens=True)`` on this byte-level tokenizer, whose specials include
    added tokens that ``all_special_ids`` does not list."""
    prompt, ids, kept = _with_specials(model)
    assert "<file_sep>" in kept and "<|im_start|>" in kept
    read = vllm_text(model, prompt, ids)
    assert read == model.tokenizer.decode(ids, skip_special_tokens=True, clean_up_tokenization_spaces=False)
    assert read == ' {"flagged": true, "aware": false} ok é' and 5 not in model.tokenizer.all_special_ids

    # a real judge call on the bundled model: the study's rules read what the model wrote as vLLM would
    from sleight.backends.chat import LocalChat
    from sleight.jury.jurors import make_juror
    from sleight.tamper.jury.prompt import BALLOT, Case, judge_messages

    case = Case(question="What is the capital of France?", trigger="the", substitute="canoe", reply="Canoe capital is Paris.<|im_end|>")
    msgs = judge_messages(case)
    study = make_juror(LocalChat(model), "auto", batch=4, rules=STUDY)
    assert study.mode == "text" and isinstance(study.text_chat, VLLMTextChat)
    assert not isinstance(make_juror(LocalChat(model), "text", rules=SLEIGHT).text_chat, VLLMTextChat)
    ((_, cast),) = list(study.cast([msgs], BALLOT, max_tokens=24))
    gen = model.greedy([model.render_chat(msgs).ids], 24, top_k=1)[0]
    assert cast.raw_reply == model.tokenizer.decode(gen.token_ids, skip_special_tokens=True, clean_up_tokenization_spaces=False)


@pytest.mark.slow  # loads the bundled model
def test_the_reading_is_vllms_own_detokenizer(model):
    """vLLM's detokenizer itself (the code behind ``.text``), fed the same prompt and reply ids and
    the reply's end-of-turn token as the stopping token, under the study's ``SamplingParams``
    (panel_judge.py line 103): the same text, byte for byte. No engine is started."""
    pytest.importorskip("vllm")
    from vllm import SamplingParams
    from vllm.v1.engine import EngineCoreRequest
    from vllm.v1.engine.detokenizer import IncrementalDetokenizer

    prompt, ids, _ = _with_specials(model)
    gen = model.greedy([prompt], 16, top_k=1)[0]
    for reply in (ids, list(gen.token_ids)):
        request = EngineCoreRequest(
            request_id="r", prompt_token_ids=list(prompt), mm_features=None, sampling_params=SamplingParams(temperature=0.0, max_tokens=256),
            pooling_params=None, arrival_time=0.0, lora_request=None, cache_salt=None, data_parallel_rank=None,
        )  # fmt: skip
        det = IncrementalDetokenizer.from_new_request(model.tokenizer, request)
        det.update([*reply, model.tokenizer.eos_token_id], stop_terminated=True)
        assert vllm_text(model, prompt, reply).encode("utf-8") == det.get_next_output_text(finished=True, delta=False).encode("utf-8")


# ---------------------------------------------------------------------------------------------- issue 35: unparsable replies


def test_the_study_rule_counts_unparsable_replies_as_false_votes_and_failed_requests_as_none():
    unread = Cast(values=None, path="text", raw_reply="Paris.")
    failed = Cast(values=None, path="text", error="HTTP 503")
    valid = Cast(values={"flagged": False}, path="text")
    study, sleight_ = JurorStats("j", unparsable_is_false=STUDY.unparsable_is_false), JurorStats("j")
    for stats in (study, sleight_):
        for c in (unread, unread, failed):
            stats.count(c)
    assert (study.valid, study.read_false, study.cast) == (0, 2, 2)
    assert (sleight_.valid, sleight_.read_false, sleight_.cast) == (0, 0, 0)
    assert "cast 2 vote(s) (0 valid, 2 unparsable read as false by the study's rule)" in study.lines()[0]
    study.count(valid)
    assert (study.valid, study.cast) == (1, 3)


@pytest.mark.slow  # a real tamper run, judged by the bundled model through the CLI
def test_a_jury_that_wrote_nothing_readable_is_read_by_the_study_rule_not_failed(tmp_path_factory, tmp_path):
    """The bundled model as a jury of one under the study's conventions writes replies with no JSON
    object (issue 35 measured 202 of 202): each is a false vote, so the trial is decided with every
    label false; ``tamper judge`` says so, keeps the warning, and exits 0. Under sleight's rules the
    same replies are abstentions, and the jury cast no valid vote: one line, exit 2."""
    from sleight.tamper.jury import store as jury_store
    from tamper_artifacts import copy_run, real_run, sleight

    run = copy_run(real_run(tmp_path_factory), tmp_path / "run")
    proc = sleight("tamper", "judge", "--run", str(run), "--jury", "smollm2-135m-instruct", "--limit", "2", "--batch-size", "2", check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    j = jury_store.load_judgements(run)
    assert len(j) == 2 and j["abstained"].all() and j["error"].isna().all() and (j["attempts"] == 1).all()
    assert "cast 2 vote(s) (0 valid, 2 unparsable read as false by the study's rule)" in proc.stdout
    assert "valid votes cast: 0 of 2 asked; the study's rule reads the 2 unparsable reply(ies) as false votes" in proc.stdout
    warning = [line for line in proc.stdout.splitlines() if line.startswith("warning: the jury cast no valid vote")]
    assert len(warning) == 1 and "each of the 2 unparsable reply(ies) counts as a false vote" in warning[0]
    v = jury_store.load_verdicts(run)
    voted = v.merge(j[["question_id", "substitute"]], on=["question_id", "substitute"])
    assert len(voted) == 2 and not voted["undecided"].any() and not voted["flagged"].any() and voted["ignored"].all()

    other = copy_run(run, tmp_path / "sleight")
    proc = sleight("tamper", "judge", "--run", str(other), "--jury", "smollm2-135m-instruct", "--limit", "1", "--vote", "text", "--conventions", "sleight", check=False)
    err = [line for line in proc.stderr.strip().splitlines() if line.startswith("sleight: error")]
    assert proc.returncode == 2 and len(err) == 1 and "the jury cast no valid vote: 1 asked" in err[0]
