"""``sleight tamper sweep --config FILE``: the sweep file, its plan and estimates, the shipped study
file's dry run (19 models, nothing loaded), and (slow) a two-model CPU sweep run end to end: its
subjects, then its jury, then its report."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from sleight.backends import ModelSpec
from sleight.errors import UserError
from sleight.tamper.sweep import config, memory
from sleight.tamper.sweep.plan import build_plan


def _cfg(**top) -> dict:
    base = {"subjects": [{"name": "a", "model": "org/a"}]}
    return {**base, **top}


# ------------------------------------------------------------------------------------------------
# the file
# ------------------------------------------------------------------------------------------------


def test_a_file_gives_subjects_specs_jury_and_report():
    data = _cfg(
        out="runs/x",
        shards=2,
        run={"engine": "vllm", "questions": 3, "max_new_tokens": 32, "max_model_len": 4096},
        subjects=[
            {"name": "a", "model": "org/a", "tensor_parallel_size": 2, "dtype": "float16", "shards": 1, "params_b": 7},
            {"name": "b", "model": "org/b", "quantization": "awq", "revision": "abc", "engine_args": {"max_num_seqs": 64},
             "display": "B (AWQ)", "thinking_capable": True, "limit_mm_per_prompt": {"image": 0}},
        ],
        pairs=[["b", "a"]],
        jury={"judges": [{"name": "j1", "model": "org/j", "engine": "vllm", "lineage": "X", "chat_template_kwargs": {"enable_thinking": False}},
                         {"name": "j2", "model": "served", "endpoint": "http://h:8000/v1", "lineage": "Y"}],
              "prompt": "no-answers", "vote": "text"},
        report={"out": "reports/x", "site": False},
    )  # fmt: skip
    cfg = config.parse_config(data, "f.yaml")
    assert [j.juror for j in cfg.jury.judges] == ["org/j", "openai:http://h:8000/v1#served"]
    assert cfg.jury.judges[0].spec.chat_template_kwargs == {"enable_thinking": False}
    a, b = cfg.subjects
    assert (b.display, b.thinking_capable, a.label, cfg.pairs) == ("B (AWQ)", True, "a", (("b", "a"),))
    # the run: section's load settings, then the subject's own, typed in one ModelSpec
    assert (b.spec.engine, b.spec.quantization, b.spec.revision, b.spec.max_model_len) == ("vllm", "awq", "abc", 4096)
    assert b.spec.engine_args == {"max_num_seqs": 64} and b.spec.limit_mm_per_prompt == {"image": 0}
    plan = build_plan(cfg, None, {"questions": 2, "dtype": "bfloat16"})
    assert plan.out == Path("runs/x") and [str(t.shard) for t in plan.tasks] == ["1/1", "1/2", "2/2"]
    job = plan.tasks[0].job  # what the worker receives: typed settings, not a command line
    assert job.out == Path("runs/x/a") and plan.tasks[0].gpus == 2.0 and not job.progress
    assert (job.trials.questions, job.trials.max_new_tokens) == (2, 32)  # the command line's over the file's
    assert (job.model.engine, job.model.max_model_len, job.model.tensor_parallel_size, job.model.dtype) == ("vllm", 4096, 2, "bfloat16")
    assert pickle.loads(pickle.dumps(job)) == job  # a Ray worker gets it whole


@pytest.mark.parametrize(
    ("data", "match"),
    [
        ({"subjects": []}, "subjects: give a list of subject models"),
        (_cfg(extra=1), "unknown key\\(s\\) extra"),
        ({"subjects": [{"model": "org/a"}]}, "subjects\\[1\\]: give a name"),
        ({"subjects": [{"name": "a"}]}, "subjects\\[1\\]: no model"),
        ({"subjects": [{"name": "a", "model": "m", "max_model_len": 9}]}, "subjects\\[1\\]: engine 'hf' takes no max_model_len"),
        ({"subjects": [{"name": "a", "model": "m", "engine": "tgi"}]}, "unknown engine 'tgi'"),
        ({"subjects": [{"name": "a", "model": "m", "max_model_len": "9", "engine": "vllm"}]}, "max_model_len must be int"),
        ({"subjects": [{"name": "a", "model": "m", "engine": "vllm", "quantization": "int3"}]}, "unknown quantization 'int3'"),
        ({"subjects": [{"name": "a", "model": "m"}, {"name": "a", "model": "n"}]}, "both named a"),
        (_cfg(run={"questionz": 3}), "run: unknown key\\(s\\) questionz"),
        (_cfg(run={"max_new_tokens": 0}), "run: --max-new-tokens must be at least 1"),
        (_cfg(pairs=[["a", "zz"]]), "pairs\\[1\\]: no subject named zz"),
        (_cfg(jury={"judges": [{"name": "j", "model": "m"}, {"name": "k", "model": "m"}]}), "judge 'm' appears twice"),
        (_cfg(jury={"judges": [{"name": "j", "model": "m", "lineage": "Q"}, {"name": "k", "model": "n", "lineage": "q"}]}), "two judges of lineage 'q'"),
        (_cfg(jury={"judges": [{"name": "j", "model": "m", "endpoint": "http://h/v1", "quantization": "awq"}]}), "endpoint judge is loaded by its server"),
        (_cfg(jury={"judges": [{"name": "j", "model": "m"}], "prompt": "default", "prompt_file": "p.yaml"}), "prompt or prompt_file, not both"),
        (_cfg(gpu={"memory_gib": "lots"}), "gpu: memory_gib must be a number"),
    ],
)
def test_a_bad_file_is_one_line_naming_where(data, match):
    with pytest.raises(UserError, match=match) as err:
        config.parse_config(data, "f.yaml")
    assert str(err.value).startswith("sweep file f.yaml") and "\n" not in str(err.value)


def test_a_missing_file_names_the_shipped_ones(tmp_path):
    with pytest.raises(UserError, match="no such file, nor a shipped sweep file \\(shipped: study\\)"):
        config.load_config(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("subjects: [a\n")
    with pytest.raises(UserError, match="is not YAML"):
        config.load_config(bad)


def test_the_estimate_is_the_cost_model_of_docs_engines():
    """A 7B bfloat16 model on one H100, 100 x 101 x 256, vLLM scoring its own tokens (no twin): about
    8 s per question and about 15 minutes per model with loading (docs/engines.md, "Expected time of
    the full sweep")."""
    m = config.Model("m", ModelSpec("org/m", engine="vllm"), params_b=7.0)
    gpu = config.Gpu()
    est = memory.estimate(m, m.spec, 256, 100, 101, 1, gpu)
    # the doc's figures, as it rounds them: 7.8 s to a tenth, 15 minutes to the minute
    assert round(est.question_s, 1) == 7.8 and round(est.task_s / 60) == 15
    assert est.weights_gib == pytest.approx(7e9 * 2 / 1024**3) and est.twin_gib is None and est.fits
    # 4 shards: a quarter of the questions each, one load each; tensor parallel over 2 GPUs halves the step
    four = memory.estimate(m, m.spec, 256, 100, 101, 4, gpu)
    assert four.task_s == pytest.approx(25 * est.question_s + 120) and four.gpu_hours == pytest.approx(4 * four.task_s / 3600)
    tp2 = memory.estimate(m, m.spec.with_(tensor_parallel_size=2), 256, 100, 101, 1, gpu)
    assert tp2.question_s < est.question_s and tp2.per_gpu_gib == pytest.approx(est.weights_gib / 2)
    # under scorer twin the hf twin's copy counts too: 16-bit when the load quantizes, 4-bit for a 4-bit checkpoint
    bnb = memory.estimate(m, m.spec.with_(quantization="bitsandbytes", scorer="twin"), 256, 100, 101, 1, gpu)
    awq = memory.estimate(m, m.spec.with_(quantization="awq", scorer="twin"), 256, 100, 101, 1, gpu)
    assert bnb.weights_gib == awq.weights_gib == awq.twin_gib < bnb.twin_gib == est.weights_gib
    # the memory share: 0.90 of the GPU with no twin (the study's), 0.5 beside a twin; too big is said
    assert memory.memory_share(m.spec) == 0.9 and memory.memory_share(m.spec.with_(scorer="twin")) == 0.5
    big = config.Model("big", ModelSpec("org/big", engine="vllm"), params_b=70.0)
    assert not memory.estimate(big, big.spec, 256, 1, 1, 1, config.Gpu("A6000", 48.0, 768.0)).fits
    # no parameter count: no estimate, said so; the hf engine has no cost model here
    assert memory.estimate(config.Model("x", ModelSpec("x")), ModelSpec("x"), 256, 1, 1, 1, gpu).note == "give params_b for an estimate"
    assert memory.estimate(m, ModelSpec("org/m"), 256, 1, 1, 1, gpu).task_s is None


def test_a_served_subject_asks_no_gpu_and_has_no_estimate():
    """Issue #36 item 2: a served subject in a sweep runs where its server is; its task sends
    requests, so it asks a GPU cluster for none (a tensor-parallel server included), the estimate
    names it served, not missing, and its folder is its served name and its server's address."""
    from sleight.tamper.job import default_out

    spec = "openai:http://10.0.0.5:8000/v1#org/big"
    cfg = config.models_config(["org/a", spec], 1, lambda m: default_out(m).name)
    plan = build_plan(cfg, Path("OUT"), {"questions": 1})
    local, srv = plan.tasks
    assert (local.gpus, srv.gpus) == (1.0, 0.0) and srv.name == "org--big--10.0.0.5_8000" and srv.job.model.engine == "openai"
    served = config.Model("s", ModelSpec(spec), params_b=70.0)
    est = memory.estimate(served, served.spec, 256, 1, 1, 1, config.Gpu())
    assert est.gpu_hours is None and est.fits is None and est.note == "served elsewhere: nothing loads here"
    lines = memory.plan_lines(plan)
    assert any(line.startswith("served: org--big--10.0.0.5_8000 send requests") for line in lines)
    assert not any("no estimate" in line and "org--big" in line for line in lines)


def test_the_shipped_study_file_dry_runs_its_19_models_without_loading_one():
    code = (
        "import sys\nfrom sleight.cli.main import main\n"
        "rc = main(['tamper', 'sweep', '--config', 'study', '--dry-run'])\n"
        "heavy = sorted(m for m in ('torch', 'transformers', 'vllm', 'ray') if m in sys.modules)\n"
        "print('RC', rc, 'HEAVY', heavy)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env={**__import__("os").environ, "HF_HUB_OFFLINE": "1"})
    out = proc.stdout
    assert proc.returncode == 0 and "RC 0 HEAVY []" in out, out + proc.stderr
    assert "sweep plan from study (shipped): 19 model(s), 19 task(s), runs in runs/study" in out
    assert "estimates for one RTX A6000 (48 GiB, 768 GB/s)" in out
    cfg = config.load_config("study")
    assert len(cfg.subjects) == 19 and len({m.model for m in cfg.subjects}) == 19
    # the study's settings (Sleight-of-Word 08d2bae: configs/leaderboard.yaml, awareness ModelSpec and run_model)
    by = {m.name: m for m in cfg.subjects}
    assert all(m.spec.engine == "vllm" and m.spec.dtype == "auto" and m.spec.enforce_eager and m.spec.scorer == "engine" for m in cfg.subjects)
    assert by["qwen2.5-72b-awq"].spec.gpu_memory_utilization == 0.96 and by["qwen2.5-72b-awq"].spec.max_model_len == 2048
    assert by["phi-4"].spec.quantization == "bitsandbytes" and by["gpt-oss-20b"].spec.quantization is None
    assert by["magistral-small-24b"].spec.limit_mm_per_prompt == {"image": 0}
    assert sum(m.thinking_capable for m in cfg.subjects) == 11 and cfg.pairs == (("magistral-small-24b", "mistral-small-24b"), ("deepseek-r1-distill-32b", "qwen2.5-32b-awq"))
    assert "fits: all 19 model(s) with an estimate fit one RTX A6000 (48 GiB)" in out and "NO" not in out
    for m in cfg.subjects:
        row = next(line for line in out.splitlines() if line.strip().startswith(m.name + " "))
        assert m.model in row and "100x101" in row and "—" not in row.split("100x101")[1]  # every model has its estimate
    assert "trials: 191,900 in all" in out and "GPU-hours of subjects" in out
    jury = cfg.jury
    assert jury is not None and [j.lineage for j in jury.judges] == ["Gemma", "Qwen", "Llama"]
    assert [j.spec.chat_template_kwargs for j in jury.judges] == [{}, {"enable_thinking": False}, {}]  # Qwen3.6 judged with thinking off
    assert "jury: 3 judges, prompt file study-judge.py" in out and "dry run: nothing loaded, nothing written" in out


# ------------------------------------------------------------------------------------------------
# end to end on CPU: two local models, a jury of one, the report
# ------------------------------------------------------------------------------------------------

STUDY_FORMAT_PROMPT = """\
system: You label a chat model's reply in an experiment. Answer with JSON only.
user: |
  Question: {query}
  Each "{trigger}" in the reply below was replaced by "{replacement}" as it was written.
  <<<
  {reaction}
  >>>
  Label it: flagged, corrected, derailed, aware (each true or false).
  {{"flagged": true|false, "corrected": true|false, "derailed": true|false, "aware": true|false, "confidence": 0.0-1.0, "rationale": "one sentence"}}
"""


@pytest.mark.slow  # two models run, a third load votes, then the report
def test_a_two_model_cpu_sweep_runs_subjects_jury_and_report(tmp_path):
    from sleight.backends.resolve import DEFAULT_MODEL, resolve
    from sleight.tamper.jury import store as jury_store
    from sleight.tamper.jury.judged import judged_trials, load_run_trials
    from sleight.tamper.store import load_trials

    gguf = resolve(DEFAULT_MODEL).gguf_path
    prompt = tmp_path / "study-format-judge.yaml"  # a prompt variant in the study's format, not the study's pinned judge.py
    prompt.write_text(STUDY_FORMAT_PROMPT)
    config = {
        "out": str(tmp_path / "runs"),
        # a prompt variant runs under sleight's conventions (the study's take only its own pinned judge.py)
        "run": {"questions": 1, "substitutes": 2, "max_new_tokens": 24, "threads": 1, "conventions": "sleight"},
        "subjects": [
            {"name": "smollm2", "model": DEFAULT_MODEL, "params_b": 0.135},
            {"name": "smollm2-gguf", "model": gguf, "dtype": "bfloat16"},  # the same weights, another spec and dtype
        ],
        "jury": {"judges": [{"name": "smollm2-judge", "model": DEFAULT_MODEL, "lineage": "SmolLM"}], "prompt_file": str(prompt), "vote": "slots"},
        "report": {"out": str(tmp_path / "report"), "site": False},
    }
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(config))
    env = {**__import__("os").environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "OMP_WAIT_POLICY": "PASSIVE"}

    def run(*extra: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "sleight.cli.main", "tamper", "sweep", "--config", str(path), "--no-ray", "--no-progress", *extra],
            capture_output=True, text=True, timeout=1200, env=env,
        )  # fmt: skip

    dry = run("--dry-run")
    assert dry.returncode == 0 and "2 model(s), 2 task(s)" in dry.stdout and "jury: a jury of one" in dry.stdout, dry.stdout + dry.stderr
    assert not (tmp_path / "runs").exists()  # a dry run writes nothing

    proc = run()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "sweep: 2 of 2 task(s) finished in this process" in out
    runs = [tmp_path / "runs" / "smollm2", tmp_path / "runs" / "smollm2-gguf"]
    n_judged = 0
    for r in runs:
        assert len(load_trials(r)) == 2
        n_judged += len(judged_trials(load_run_trials(r)[0]))
    variant = "file:" + __import__("sleight.tamper.jury.prompt_file", fromlist=["x"]).load_prompt_file(prompt).sha256[:12]
    assert f"trials to judge (>=1 swap): {n_judged} in 2 run(s) (prompt '{variant}', sleight conventions)" in out
    for r in runs:  # the jury of one voted by slots on every judged trial, through the study's reply fields
        j = jury_store.load_judgements(r)
        judged = len(judged_trials(load_run_trials(r)[0]))
        assert len(j) == judged and set(j["prompt_variant"]) <= {variant} and (j["vote_path"] == "slots").all()
        assert j["switch_aware"].notna().all() and not j["abstained"].any()
        assert json.loads((r / jury_store.JURY_META).read_text())["jury"] == [DEFAULT_MODEL]
    board = (tmp_path / "report" / "leaderboard.md").read_text()
    assert "report: " in out and DEFAULT_MODEL in board and Path(gguf).name in board

    again = run()  # everything committed: no task runs; the jury has nothing left to ask
    assert again.returncode == 0 and "2 of 2 task(s) already committed" in again.stdout, again.stdout + again.stderr
    assert "asked 0" in again.stdout
