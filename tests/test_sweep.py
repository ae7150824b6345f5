"""``sleight tamper sweep``: its pure parts, and (slow) a 2-model x 2-shard sweep on a real local Ray
cluster, one task SIGKILLed mid-way, resumed by rerunning the sweep, record for record equal to
unsharded single-process runs, with no Ray process left behind."""

from __future__ import annotations

import io
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sleight import OPENMP_ENV, set_openmp_env
from sleight.backends import ModelSpec
from sleight.errors import UserError
from sleight.tamper.job import TamperJob, TrialSettings
from sleight.tamper.sweep import config, execute
from sleight.tamper.sweep.plan import Task, build_plan

# ------------------------------------------------------------------------------------------------
# pure parts
# ------------------------------------------------------------------------------------------------


def test_plan_has_one_task_per_model_and_shard():
    cfg = config.models_config(["a", "org/b"], 2, lambda m: m.replace("/", "--"))
    plan = build_plan(cfg, Path("OUT"))
    assert [(t.name, str(t.shard), str(t.out)) for t in plan.tasks] == [
        ("a", "1/2", "OUT/a"),
        ("a", "2/2", "OUT/a"),
        ("org--b", "1/2", "OUT/org--b"),
        ("org--b", "2/2", "OUT/org--b"),
    ]
    assert plan.tasks[1].job == TamperJob(ModelSpec("a"), TrialSettings(), out=Path("OUT/a"), shard="2/2", progress=False)
    assert plan.tasks[1].label == "a [2/2]" and plan.tasks[1].gpus == 1.0
    with pytest.raises(UserError, match="would both write a folder named x"):
        config.models_config(["x", "./x"], 1, lambda m: "x")
    with pytest.raises(UserError, match="--shards must be at least 1"):
        config.models_config(["a"], 0, str)
    with pytest.raises(UserError, match="--shards must be at least 1"):
        build_plan(cfg, None, shards=0)
    assert config.parse_models(" a, ,b ,") == ["a", "b"]


def test_the_command_lines_settings_reach_each_tasks_job():
    from sleight.cli.main import build_parser
    from sleight.cli.tamper_sweep import cli_overrides

    args = build_parser().parse_args(
        ["tamper", "sweep", "--models", "a", "--questions", "3", "--trigger", "a", "--dtype", "float32", "--shards", "2",
         "--tensor-parallel-size", "2", "--engine", "vllm", "--thinking", "off", "--scorer", "twin"]
    )  # fmt: skip
    overrides = cli_overrides(args)
    assert overrides == {"questions": 3, "trigger": "a", "dtype": "float32", "tensor_parallel_size": 2, "engine": "vllm",
                         "chat_template_kwargs": {"enable_thinking": False}, "scorer": "twin"}  # fmt: skip
    plan = build_plan(config.models_config(["m.gguf"], 2, lambda m: "m"), Path("OUT"), overrides)
    job = plan.tasks[1].job
    assert (job.model.model, job.shard, job.out, job.trials.questions, job.trials.trigger) == ("m.gguf", "2/2", Path("OUT/m"), 3, "a")
    assert (job.model.engine, job.model.tensor_parallel_size, job.model.scorer) == ("vllm", 2, "twin")
    assert plan.tasks[1].gpus == 2.0  # a GPU cluster gives the task its tensor-parallel GPUs
    with pytest.raises(UserError, match="m: engine 'hf' takes no quantization"):
        build_plan(config.models_config(["m"], 1, str), None, {"quantization": "awq"})


def test_progress_line_and_display():
    line = execute.progress_line({"a": (6, 12), "b": (0, 12)}, running=2, finished=1, failed=0, elapsed_s=75)
    assert line == "sweep: 6/24 trials (25%) [1:15]; a 6/12, b 0/12; tasks: 2 running, 1 done, 0 failed"
    buf = io.StringIO()
    d = execute.Display({"a": (Path("/nonexistent"), 2, 3)}, stream=buf, interactive=False)
    d.refresh()
    d.refresh()  # nothing changed: no new line off a terminal
    d.failed = 1
    d.refresh()
    assert buf.getvalue().count("\n") == 2 and "a 0/6" in buf.getvalue()


def test_a_wrong_prompt_file_under_the_study_conventions_is_refused_before_anything_runs(tmp_path, capsys):
    """The sweep checks its jury's prompt file as ``tamper judge`` does (``checked_for``), at plan
    time: under the study's conventions (the default) a file that is not the study's pinned judge
    module is one line, before any task is prepared or any model loads; under sleight's it passes."""
    from sleight.cli.main import main
    from sleight.tamper.jury.prompt_file import STUDY_JUDGE_SHA256

    prompt = tmp_path / "own-judge.yaml"
    prompt.write_text('user: "Question: {query}\\n<<<\\n{reaction}\\n>>>"\n')
    data = {
        "out": str(tmp_path / "runs"),
        "subjects": [{"name": "a", "model": "org/a"}],
        "jury": {"judges": [{"name": "j", "model": "org/j"}], "prompt_file": str(prompt)},
    }

    def must_not_run(job: TamperJob) -> object:
        raise AssertionError(f"{job.model.model} was prepared or run")

    how = execute.Scheduling(no_ray=True, progress=False, task_fn=must_not_run, prepare_fn=must_not_run)
    with pytest.raises(UserError) as err:
        execute.execute(build_plan(config.parse_config(data, "f.yaml"), None), how, echo=lambda line: None)
    line = str(err.value)
    assert "\n" not in line and str(prompt) in line and STUDY_JUDGE_SHA256 in line and "--conventions sleight" in line

    # through the command: one line, exit 2, nothing written
    path = tmp_path / "sweep.yaml"
    path.write_text(json.dumps(data))
    assert main(["tamper", "sweep", "--config", str(path), "--no-ray", "--no-progress"]) == 2
    err_lines = capsys.readouterr().err.strip().splitlines()
    assert len(err_lines) == 1 and err_lines[0].startswith("sleight: error: --prompt-file") and STUDY_JUDGE_SHA256 in err_lines[0]
    assert not (tmp_path / "runs" / "a").exists()

    # the same file is a prompt variant under sleight's conventions: checked, then the tasks are prepared
    class Prepared(Exception):
        pass

    def prepared(job: TamperJob) -> object:
        raise Prepared(job.trials.conventions)

    sleight_conventions = {**data, "run": {"conventions": "sleight"}}
    with pytest.raises(Prepared, match="sleight"):
        execute.execute(build_plan(config.parse_config(sleight_conventions, "f.yaml"), None), execute.Scheduling(no_ray=True, progress=False, prepare_fn=prepared))


def test_task_environment_and_error_lines():
    env = execute.task_env(0, 2, {"HF_HUB_OFFLINE": "1", "SECRET": "x"})
    assert env == {**OPENMP_ENV, "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "2", "HF_HUB_OFFLINE": "1"}
    assert "OMP_NUM_THREADS" not in execute.task_env(1, 1, {})
    assert execute.local_cluster_env({}) == {"RAY_worker_niceness": "0"}  # Ray's default nices workers by 15
    assert execute.local_cluster_env({"RAY_worker_niceness": "5"}) == {}  # a user's own stays
    assert execute.error_line(UserError("bad input\nmore")) == "bad input"
    assert execute.error_line(ValueError("x\ny")) == "ValueError: y"


def test_openmp_settings_leave_a_users_own():
    """sleight's wait policy and bounded spin where the user set neither; a policy of the user's own
    gets no spin count of sleight's (it would cap an ACTIVE one); a spin count of theirs stays."""
    for given, expected in (
        ({}, OPENMP_ENV),
        ({"OMP_WAIT_POLICY": "ACTIVE"}, {"OMP_WAIT_POLICY": "ACTIVE"}),
        ({"OMP_WAIT_POLICY": "passive"}, {"OMP_WAIT_POLICY": "passive", "GOMP_SPINCOUNT": OPENMP_ENV["GOMP_SPINCOUNT"]}),
        ({"GOMP_SPINCOUNT": "0"}, {"OMP_WAIT_POLICY": "PASSIVE", "GOMP_SPINCOUNT": "0"}),
    ):
        env = dict(given)
        set_openmp_env(env)
        assert env == expected


# ------------------------------------------------------------------------------------------------
# a real local Ray cluster
# ------------------------------------------------------------------------------------------------

SMALL = ["--questions", "3", "--substitutes", "3", "--max-new-tokens", "16"]
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_WAIT_POLICY": "PASSIVE", "TOKENIZERS_PARALLELISM": "false"}
RAY_PROCESS = re.compile(r"raylet|gcs_server|ray::|ray/_private|ray/dashboard|default_worker\.py|runtime_env/agent")


def ray_processes() -> set[int]:
    """Pids of the Ray processes on this machine (its raylet, GCS, workers, agents)."""
    out = set()
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                cmd = (p / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if RAY_PROCESS.search(cmd):
                out.add(int(p.name))
    return out


def wait_until_gone(before: set[int], timeout: float = 90) -> set[int]:
    deadline = time.time() + timeout
    left = ray_processes() - before
    while left and time.time() < deadline:
        time.sleep(0.5)
        left = ray_processes() - before
    return left


def _sleight(*argv: str, timeout: float = 1500) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "sleight.cli.main", *argv], env=ENV, capture_output=True, text=True, timeout=timeout
    )


@pytest.fixture(scope="module")
def gguf() -> str:
    from sleight.backends.resolve import DEFAULT_MODEL, resolve

    path = resolve(DEFAULT_MODEL).gguf_path
    assert path and Path(path).is_file()
    return str(path)


@pytest.mark.slow
def test_ray_sweep_killed_task_resumed_equals_unsharded_runs(tmp_path, gguf):
    pytest.importorskip("ray")
    from sleight.tamper.store import load_clean, load_trials
    from test_shards import same_records

    models = ["smollm2-135m-instruct", gguf]
    names = ["smollm2-135m-instruct", Path(gguf).stem]
    out = tmp_path / "sweep"
    before = ray_processes()
    sweep_argv = [
        sys.executable,
        "-m",
        "sleight.cli.main",
        "tamper",
        "sweep",
        "--models",
        ",".join(models),
        "--shards",
        "2",
        *SMALL,
        "--out",
        str(out),
    ]
    proc = subprocess.Popen(sweep_argv, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    # Kill the task of shard 1/2 of the first model once it has committed one of its two questions.
    victim, deadline = None, time.time() + 900
    while victim is None and time.time() < deadline and proc.poll() is None:
        for rec in (out / names[0] / "sessions").glob("*.json") if (out / names[0] / "sessions").is_dir() else []:
            try:
                s = json.loads(rec.read_text())
            except ValueError:
                continue
            if s["shard"] == "1/2" and s["new_units"] == 1 and not s["finished"]:
                victim = s
        time.sleep(0.05)
    assert victim is not None, "no task was caught mid-way"
    # a task runs at the command's own priority, not niced below every other job (local_cluster_env)
    assert os.getpriority(os.PRIO_PROCESS, victim["pid"]) == os.getpriority(os.PRIO_PROCESS, 0)
    os.kill(victim["pid"], signal.SIGKILL)
    committed = {p.name: p.stat().st_mtime_ns for p in (out / names[0] / "trials.parquet").glob("*.parquet")}
    stdout, stderr = proc.communicate(timeout=1500)
    assert proc.returncode == 2, stdout + stderr
    assert "smollm2-135m-instruct [1/2]: FAILED: its worker process died" in stdout, stdout
    assert "1 of 4 sweep task(s) failed" in stderr.strip().splitlines()[-1] and "Traceback" not in stderr + stdout
    assert re.search(r"sweep: \d+/18 trials .*; tasks: ", stdout)  # one display across the tasks (a line per change here)
    assert not wait_until_gone(before), "the sweep left Ray processes behind"

    # The rerun skips the committed tasks and resumes the killed one: nothing lost, nothing twice.
    rerun = _sleight(*sweep_argv[3:])
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    assert "3 of 4 task(s) already committed" in rerun.stdout and "question(s) were already done" in rerun.stdout
    for name, mtime in committed.items():
        assert (out / names[0] / "trials.parquet" / name).stat().st_mtime_ns == mtime
    assert not wait_until_gone(before), "the sweep left Ray processes behind"

    # Record for record the trials of unsharded single-process runs (one torch thread, as each CPU task).
    for model, name in zip(models, names):
        ref = tmp_path / "ref" / name
        done = _sleight("tamper", "run", "--model", model, *SMALL, "--threads", "1", "--no-progress", "--out", str(ref))
        assert done.returncode == 0, done.stderr
        assert same_records(load_trials(out / name), load_trials(ref)), name
        assert same_records(load_clean(out / name), load_clean(ref)), name

    # The sweep folder is one argument for the readers; a third run of the sweep has nothing to do.
    report = _sleight("tamper", "report", str(out), "--out", str(tmp_path / "report"), "--no-site")
    assert report.returncode == 0, report.stderr
    board = (tmp_path / "report" / "leaderboard.md").read_text()
    assert "smollm2-135m-instruct" in board and Path(gguf).name in board
    idle = _sleight(*sweep_argv[3:], "--no-ray")
    assert idle.returncode == 0 and "sweep: nothing to do" in idle.stdout


def test_ray_tasks_ask_for_their_own_gpus_and_cpu_tasks_get_threads(monkeypatch):
    """``run_on_ray`` against a stand-in of the ``ray`` module's calls it makes (init, remote,
    options, wait, get, shutdown): each task asks for its own tensor-parallel GPUs on a GPU cluster,
    none on a CPU cluster, where its torch threads are its CPUs."""

    class Ref:
        def __init__(self, value):
            self.value = value

    class Remote:
        def __init__(self, fn, log):
            self.fn, self.log, self.opts = fn, log, {}

        def options(self, **opts):
            r = Remote(self.fn, self.log)
            r.opts = opts
            return r

        def remote(self, job):
            self.log.append((self.opts["num_gpus"], self.opts["runtime_env"]["env_vars"], job))
            return Ref(self.fn(job))

    class FakeRay:
        def __init__(self, gpus):
            self.gpus, self.log, self.down = gpus, [], False

        def init(self, **kw):
            self.env = os.environ.get("RAY_worker_niceness")  # what a local cluster started here reads

        def cluster_resources(self):
            return {"GPU": self.gpus}

        def remote(self, **kw):
            return lambda fn: Remote(fn, self.log)

        def wait(self, pending, num_returns, timeout):
            return pending[:1], pending[1:]

        def get(self, ref):
            return ref.value

        def shutdown(self):
            self.down = True

    monkeypatch.delenv("RAY_worker_niceness", raising=False)
    tasks = [Task("a", TamperJob(ModelSpec("a", engine="vllm"), out=Path("OUT/a"))),
             Task("b", TamperJob(ModelSpec("b", engine="vllm", tensor_parallel_size=4), out=Path("OUT/b")))]  # fmt: skip
    for gpus, expected in ((8.0, [1.0, 4.0]), (0.0, [0.0, 0.0])):
        ray = FakeRay(gpus)
        display = execute.Display({}, stream=io.StringIO(), enabled=False)
        results, asked = execute.run_on_ray(ray, tasks, lambda job: [job.model.model], display, address=None, gpus=None, cpus=2)
        assert asked == expected and ray.down and all(r.ok for r in results)
        assert ray.env == "0" and "RAY_worker_niceness" not in os.environ  # for ray.init only
        if gpus:
            assert [job for _, _, job in ray.log] == [t.job for t in tasks]
        else:  # on CPU a task's torch threads are its CPUs
            assert [job.model.threads for _, _, job in ray.log] == [2, 2]
            assert all(env["OMP_NUM_THREADS"] == "2" for _, env, _ in ray.log)
