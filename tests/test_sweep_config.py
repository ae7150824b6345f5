"""``sleight tamper sweep --config FILE``: the sweep file, its plan and estimates, the shipped study
file's dry run (19 models, nothing loaded), and (slow) a two-model CPU sweep run end to end: its
subjects, then its jury, then its report."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from sleight.errors import UserError
from sleight.tamper import sweep


def _defaults() -> dict:
    from sleight.cli.tamper_sweep import run_defaults

    return run_defaults()


def _cfg(**top) -> dict:
    base = {"subjects": [{"name": "a", "model": "org/a"}]}
    return {**base, **top}


# ------------------------------------------------------------------------------------------------
# the file
# ------------------------------------------------------------------------------------------------


def test_a_file_gives_subjects_load_settings_jury_and_report():
    data = _cfg(
        out="runs/x",
        shards=2,
        run={"engine": "vllm", "questions": 3, "max_new_tokens": 32, "max_model_len": 4096},
        subjects=[
            {"name": "a", "model": "org/a", "tensor_parallel_size": 2, "dtype": "float16", "shards": 1, "params_b": 7},
            {"name": "b", "model": "org/b", "quantization": "awq", "revision": "abc", "engine_args": {"enforce_eager": True}},
        ],
        jury={"judges": [{"name": "j1", "model": "org/j", "engine": "vllm", "lineage": "X"},
                         {"name": "j2", "model": "served", "endpoint": "http://h:8000/v1", "lineage": "Y"}],
              "prompt": "no-answers", "vote": "text"},
        report={"out": "reports/x", "site": False},
    )  # fmt: skip
    cfg = sweep.parse_config(data, "f.yaml", _defaults())
    assert [j.spec for j in cfg.jury.judges] == ["org/j", "openai:http://h:8000/v1#served"]
    plan = sweep.build_plan(cfg, None, _defaults(), {"questions": 2})
    assert plan.out == Path("runs/x") and [str(t.shard) for t in plan.tasks] == ["1/1", "1/2", "2/2"]
    a = list(plan.tasks[0].argv)
    assert a[a.index("--out") + 1] == "runs/x/a" and plan.tasks[0].gpus == 2.0
    for flag, value in (("--engine", "vllm"), ("--questions", "2"), ("--max-new-tokens", "32"), ("--max-model-len", "4096"),
                        ("--tensor-parallel-size", "2"), ("--dtype", "float16")):  # fmt: skip
        assert a[a.index(flag) + 1] == value  # the file's run: section, the subject's own, the command line's
    # what no engine here takes yet is named per model (and refused before a run; shown by a dry run)
    assert plan.unsupported == {"b": ["revision", "quantization", "engine_args"]}
    with pytest.raises(UserError, match="b sets revision, quantization, engine_args, which no engine of this install takes"):
        sweep.execute(plan, sweep.Scheduling(lambda a: [], lambda a: None))


@pytest.mark.parametrize(
    ("data", "match"),
    [
        ({"subjects": []}, "subjects: give a list of subject models"),
        (_cfg(extra=1), "unknown key\\(s\\) extra"),
        ({"subjects": [{"model": "org/a"}]}, "subjects\\[1\\]: give a name"),
        ({"subjects": [{"name": "a"}]}, "subjects\\[1\\]: no model"),
        ({"subjects": [{"name": "a", "model": "m", "max_model_len": 9}]}, "max_model_len are vllm settings; set engine: vllm"),
        ({"subjects": [{"name": "a", "model": "m", "engine": "tgi"}]}, "unknown engine 'tgi'"),
        ({"subjects": [{"name": "a", "model": "m", "max_model_len": "9", "engine": "vllm"}]}, "max_model_len must be int"),
        ({"subjects": [{"name": "a", "model": "m"}, {"name": "a", "model": "n"}]}, "both named a"),
        (_cfg(run={"questionz": 3}), "run: unknown key\\(s\\) questionz"),
        (_cfg(jury={"judges": [{"name": "j", "model": "m"}, {"name": "k", "model": "m"}]}), "judge 'm' appears twice"),
        (_cfg(jury={"judges": [{"name": "j", "model": "m", "lineage": "Q"}, {"name": "k", "model": "n", "lineage": "q"}]}), "two judges of lineage 'q'"),
        (_cfg(jury={"judges": [{"name": "j", "model": "m", "endpoint": "http://h/v1", "quantization": "awq"}]}), "endpoint judge is loaded by its server"),
        (_cfg(jury={"judges": [{"name": "j", "model": "m"}], "prompt": "default", "prompt_file": "p.yaml"}), "prompt or prompt_file, not both"),
        (_cfg(gpu={"memory_gib": "lots"}), "gpu: memory_gib must be a number"),
    ],
)
def test_a_bad_file_is_one_line_naming_where(data, match):
    with pytest.raises(UserError, match=match) as err:
        sweep.parse_config(data, "f.yaml", _defaults())
    assert str(err.value).startswith("sweep file f.yaml") and "\n" not in str(err.value)


def test_a_missing_file_names_the_shipped_ones(tmp_path):
    with pytest.raises(UserError, match="no such file, nor a shipped sweep file \\(shipped: study\\)"):
        sweep.load_config(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("subjects: [a\n")
    with pytest.raises(UserError, match="is not YAML"):
        sweep.load_config(bad)


def test_the_estimate_is_the_cost_model_of_docs_engines():
    """A 7B bfloat16 model on one H100, 100 x 101 x 256: about 8 s per question and about 15
    minutes per model with loading (docs/engines.md, "Expected time of the full sweep")."""
    m = sweep.Model("m", "org/m", params_b=7.0)
    est = sweep.estimate(m, {"engine": "vllm", "max_new_tokens": 256}, 100, 101, 1, sweep.Gpu())
    # the doc's figures, as it rounds them: 7.8 s to a tenth, 15 minutes to the minute
    assert round(est.question_s, 1) == 7.8 and round(est.task_s / 60) == 15
    assert est.weights_gib == pytest.approx(7e9 * 2 / 1024**3) and est.twin_gib == est.weights_gib and est.fits
    # 4 shards: a quarter of the questions each, one load each; tensor parallel over 2 GPUs halves the step
    four = sweep.estimate(m, {"engine": "vllm"}, 100, 101, 4, sweep.Gpu())
    assert four.task_s == pytest.approx(25 * est.question_s + 120) and four.gpu_hours == pytest.approx(4 * four.task_s / 3600)
    tp2 = sweep.estimate(m, {"engine": "vllm", "tensor_parallel_size": 2}, 100, 101, 1, sweep.Gpu())
    assert tp2.question_s < est.question_s and tp2.per_gpu_gib == pytest.approx(est.weights_gib / 2 + est.twin_gib)
    # quantized on load: 4-bit weights in vLLM, 16-bit in the hf twin; a pre-quantized checkpoint: 4-bit in both
    bnb = sweep.estimate(m, {"engine": "vllm", "quantization": "bitsandbytes"}, 100, 101, 1, sweep.Gpu())
    awq = sweep.estimate(m, {"engine": "vllm", "quantization": "awq"}, 100, 101, 1, sweep.Gpu())
    assert bnb.weights_gib == awq.weights_gib == awq.twin_gib < bnb.twin_gib == est.weights_gib
    # no parameter count: no estimate, said so; the hf engine has no cost model here
    assert sweep.estimate(sweep.Model("x", "x"), {}, 1, 1, 1, sweep.Gpu()).note == "give params_b for an estimate"
    assert sweep.estimate(m, {"engine": "hf"}, 1, 1, 1, sweep.Gpu()).task_s is None


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
    cfg = sweep.load_config("study")
    assert len(cfg.subjects) == 19 and len({m.model for m in cfg.subjects}) == 19
    for m in cfg.subjects:
        row = next(line for line in out.splitlines() if line.strip().startswith(m.name + " "))
        assert m.model in row and "100x101" in row and "—" not in row.split("100x101")[1]  # every model has its estimate
    assert "trials: 191,900 in all" in out and "GPU-hours of subjects" in out
    jury = cfg.jury
    assert jury is not None and [j.lineage for j in jury.judges] == ["Gemma", "Qwen", "Llama"]
    assert "jury: 3 judges, prompt file study-judge.yaml" in out and "dry run: nothing loaded, nothing written" in out


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
    prompt = tmp_path / "study-judge.yaml"
    prompt.write_text(STUDY_FORMAT_PROMPT)
    config = {
        "out": str(tmp_path / "runs"),
        "run": {"questions": 1, "substitutes": 2, "max_new_tokens": 24, "threads": 1},
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
    assert f"trials to judge (>=1 swap): {n_judged} in 2 run(s) (prompt '{variant}')" in out
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
