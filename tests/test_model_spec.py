"""One typed ``ModelSpec`` from the command line to the engine: the flags build it once, it is checked
once (one line naming a bad setting), the tamper job carries it, and ``vllm_settings`` gives vLLM
what the study's ``run_model`` gave it (Sleight-of-Word 08d2bae, ``src/awareness/runner.py``). The
real engine receiving it is in tests/test_vllm.py (the module's engine is built from a spec)."""

from __future__ import annotations

import pickle

import pytest

from sleight.backends.spec import ModelSpec, vllm_settings
from sleight.cli.common import model_spec_from_args
from sleight.cli.main import build_parser
from sleight.cli.tamper_run import job_from_args
from sleight.errors import UserError
from sleight.tamper.job import check_scorer


def _args(*argv: str):
    return build_parser().parse_args(["tamper", "run", *argv])


def test_the_flags_build_one_spec_with_the_studys_settings():
    spec = model_spec_from_args(_args(
        "--model", "Qwen/Qwen3.6-27B", "--engine", "vllm", "--dtype", "auto", "--quantization", "bitsandbytes",
        "--max-model-len", "4096", "--gpu-memory-utilization", "0.9", "--enforce-eager", "--thinking", "off",
        "--limit-mm-per-prompt", '{"image": 0}', "--engine-args", '{"max_num_seqs": 64}', "--revision", "abc",
    ))  # fmt: skip
    assert spec == ModelSpec(
        "Qwen/Qwen3.6-27B", engine="vllm", dtype="auto", quantization="bitsandbytes", max_model_len=4096,
        gpu_memory_utilization=0.9, enforce_eager=True, chat_template_kwargs={"enable_thinking": False},
        limit_mm_per_prompt={"image": 0}, engine_args={"max_num_seqs": 64}, revision="abc",
    )  # fmt: skip
    # runner.run_model: bitsandbytes quantization loads with load_format bitsandbytes
    assert vllm_settings(spec) == {
        "revision": "abc", "quantization": "bitsandbytes", "load_format": "bitsandbytes", "limit_mm_per_prompt": {"image": 0}, "max_num_seqs": 64,
    }  # fmt: skip
    job = job_from_args(_args("--model", "m", "--questions", "2", "--shard", "1/2", "--no-progress"))
    assert (job.model, job.trials.questions, job.shard, job.progress) == (ModelSpec("m", dtype="float32"), 2, "1/2", False)
    assert pickle.loads(pickle.dumps(job)) == job


@pytest.mark.parametrize(
    ("argv", "match"),
    [
        (["--quantization", "awq"], "engine 'hf' takes no quantization \\(vllm settings; use --engine vllm\\)"),
        (["--engine", "vllm", "--gpu-memory-utilization", "1.5"], "gpu_memory_utilization must be in \\(0, 1\\]"),
        (["--engine", "vllm", "--engine-args", "[1]"], "--engine-args must be a JSON object"),
        (["--engine", "vllm", "--limit-mm-per-prompt", '{"image": -1}'], "limit_mm_per_prompt takes a count per modality"),
        (["--engine", "vllm", "--engine-args", '{"quantization": "awq"}'], "engine_args sets quantization"),
        (["--scorer", "twin"], "--scorer twin is a vllm setting"),
        (["--threads", "0"], "threads must be a whole number of at least 1"),
    ],
)
def test_a_bad_setting_is_one_line(argv, match):
    with pytest.raises(UserError, match=match) as err:
        model_spec_from_args(_args(*argv))
    assert "\n" not in str(err.value)


def test_the_full_vocabulary_entropy_asks_for_the_twin_by_name():
    """--conventions sleight records the exact entropy, which vLLM does not return: refused without
    --scorer twin, never a twin loaded silently; the study's conventions need none."""
    with pytest.raises(UserError, match="add --scorer twin"):
        check_scorer(ModelSpec("m", engine="vllm"), "sleight")
    check_scorer(ModelSpec("m", engine="vllm", scorer="twin"), "sleight")
    check_scorer(ModelSpec("m", engine="vllm"), "study")
    check_scorer(ModelSpec("m"), "sleight")


# -- issue #33 item 1: one model configuration, every flag to the engine -----------------------------
# A value for every ModelSpec field that has a flag, none of them its default (one command line, vllm).
FLAG_VALUES: dict[str, tuple[list[str], object]] = {
    "model": (["--model", "org/name"], "org/name"),
    "engine": (["--engine", "vllm"], "vllm"),
    "revision": (["--revision", "0123abc"], "0123abc"),
    "dtype": (["--dtype", "bfloat16"], "bfloat16"),
    "quantization": (["--quantization", "awq"], "awq"),
    "load_format": (["--load-format", "safetensors"], "safetensors"),
    "max_model_len": (["--max-model-len", "4096"], 4096),
    "gpu_memory_utilization": (["--gpu-memory-utilization", "0.5"], 0.5),
    "kv_cache_gib": (["--kv-cache-gib", "3"], 3.0),
    "enforce_eager": (["--no-enforce-eager"], False),
    "limit_mm_per_prompt": (["--limit-mm-per-prompt", '{"image": 0}'], {"image": 0}),
    "tensor_parallel_size": (["--tensor-parallel-size", "2"], 2),
    "pipeline_parallel_size": (["--pipeline-parallel-size", "2"], 2),
    "engine_args": (["--engine-args", '{"max_num_seqs": 8}'], {"max_num_seqs": 8}),
    "chat_template_kwargs": (["--chat-template-kwargs", '{"enable_thinking": false}'], {"enable_thinking": False}),
    "scorer": (["--scorer", "twin"], "twin"),
    "device": (["--device", "cpu"], "cpu"),
    "batch_size": (["--batch-size", "7"], 7),
    "threads": (["--threads", "3"], 3),
}


def _model_commands() -> list[tuple[tuple[str, ...], object]]:
    """Every (sub)command of the parser that takes the model flags, with its parser."""
    import argparse

    out = []

    def walk(parser: argparse.ArgumentParser, path: tuple[str, ...]) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(sub, (*path, name))
        if any(a.dest == "quantization" for a in parser._actions):
            out.append((path, parser))

    walk(build_parser(), ())
    return out


MODEL_COMMANDS = _model_commands()


def test_every_spec_field_with_a_flag_is_in_the_table_above():
    from sleight.backends.spec import options

    assert {n for n, o in options() if o.flag} == set(FLAG_VALUES)
    assert len(MODEL_COMMANDS) >= 8  # tamper run and sweep, generate, the readout commands, reproduce


@pytest.mark.parametrize("command", [c for c, _ in MODEL_COMMANDS], ids=" ".join)
def test_every_model_flag_of_every_command_reaches_the_spec_the_engine_receives(command, tmp_path):
    """Parse each command's model flags from its own parser, all set away from their defaults, and
    follow them to the spec that command hands to ``load_model``: each field arrives as given."""
    parser = dict(MODEL_COMMANDS)[command]
    takes_model = any(a.dest == "model" for a in parser._actions)  # type: ignore[attr-defined]
    argv = [*command]
    positional = {"reproduce": ["table2"], "generate": []}.get(command[-1], [])
    if command[-1] in ("audit", "scan") and command[0] == "readout":
        positional = []
    argv += positional
    for name, (flags, _value) in FLAG_VALUES.items():
        if name != "model" or takes_model:
            argv += flags
    if command == ("tamper", "sweep"):
        argv += ["--models", "org/name"]
    args = build_parser().parse_args(argv)
    if command == ("tamper", "run"):
        spec = job_from_args(args).model
    elif command == ("tamper", "sweep"):
        from sleight.cli.tamper_sweep import cli_overrides
        from sleight.tamper.sweep import config as sweep_config
        from sleight.tamper.sweep.plan import build_plan

        config = sweep_config.models_config(["org/name"], 1, lambda m: "name")
        spec = build_plan(config, tmp_path, cli_overrides(args)).tasks[0].job.model
    elif command == ("readout", "reproduce"):
        from sleight.readout.reproduce import ModelCache
        from sleight.readout.reproduce.spec import Checkpoint

        spec = ModelCache(model_spec_from_args(args, model="org/name")).spec(Checkpoint("name", "org/name"))
    else:  # every other command loads through model_from_args: load_model(model_spec_from_args(args))
        spec = model_spec_from_args(args)
    for name, (_flags, value) in FLAG_VALUES.items():
        assert getattr(spec, name) == value, f"{' '.join(command)}: {name} is {getattr(spec, name)!r}, the flag said {value!r}"


def test_no_command_reads_a_model_flag_past_the_one_spec_builder():
    """Only cli/common.py turns model flags into a spec: no other cli module reads ``args.<field>`` of a
    ModelSpec field (a flag read elsewhere is a flag that can bypass the spec, or be dropped)."""
    import ast
    from pathlib import Path

    from sleight.backends.spec import options

    names = {n for n, o in options() if o.flag} - {"model"}
    cli = Path(__file__).resolve().parents[1] / "src" / "sleight" / "cli"
    bad = []
    for path in sorted(cli.glob("*.py")):
        text = path.read_text(encoding="utf-8")
        if path.name == "common.py" or "add_model_args(" not in text:  # the jury's commands: several models, jury_args.py
            continue
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "args" and node.attr in names:
                bad.append(f"{path.name}:{node.lineno} args.{node.attr}")
    assert not bad, bad


def _main(argv, capsys):
    from sleight.cli.main import main

    code = main(argv)
    return code, capsys.readouterr().err


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        (["--quantization", "awq"], "engine 'hf' takes no quantization"),
        (["--revision", "abc"], "--revision pins a hub checkpoint's snapshot; smollm2-135m-instruct is a bundled model"),
        (["--engine", "vllm", "--revision", "abc"], "--revision pins a hub checkpoint's snapshot"),
        (["--load-format", "safetensors"], "engine 'hf' takes no load_format"),
        (["--enforce-eager"], "engine 'hf' takes no enforce_eager"),
        (["--engine-args", '{"max_num_seqs": 8}'], "engine 'hf' takes no engine_args"),
        (["--scorer", "twin"], "--scorer twin is a vllm setting"),
    ],
)
def test_reproduce_refuses_a_model_flag_that_means_nothing_here_in_one_line(extra, says, capsys, tmp_path):
    """Issue #33: ``readout reproduce table4 --models smollm2-135m-instruct --limit 1`` with a load flag
    the bundled GGUF checkpoint cannot take is refused in one line before anything runs (it was
    accepted and silently dropped)."""
    out = tmp_path / "out"
    code, err = _main(["readout", "reproduce", "table4", "--models", "smollm2-135m-instruct", "--limit", "1", "--out", str(out), *extra], capsys)
    assert code == 2 and says in err and err.count("\n") == 1, err
    assert not out.exists() or not any(out.iterdir())


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        (["--engine", "vllm"], "--engine means nothing there"),
        (["--engine", "vllm", "--quantization", "awq", "--load-format", "auto"], "--engine, --quantization, --load-format mean nothing there"),
        (["--dtype", "float16"], "--dtype means nothing there"),
        (["--threads", "1"], "--threads means nothing there"),
    ],
)
def test_a_tokenizer_only_table_refuses_weight_flags_in_one_line(extra, says, capsys, tmp_path):
    """Issue #34 (App. C.6): appendix-c6 reads each checkpoint's tokenizer and no weights, so a flag about
    the weights or the engine is refused in one line before anything runs, in the plan too."""
    for run in (["--out", str(tmp_path / "out")], ["--dry-run"]):
        code, err = _main(["readout", "reproduce", "appendix-c6", "--models", "smollm2-135m-instruct", "--limit", "1", *run, *extra], capsys)
        assert code == 2 and says in err and "appendix-c6 reads each checkpoint's tokenizer only" in err and err.count("\n") == 1, err
    assert not (tmp_path / "out").exists()


def test_a_tokenizer_only_table_beside_others_notes_the_flags_it_does_not_read(capsys, tmp_path):
    """Named beside a table that loads weights, the flag reaches that table's engine, so it is not refused:
    the tokenizer-only table notes it in its table and on its status line (App. C.6)."""
    from sleight.readout.reproduce import ModelCache, reproduce

    code, err = _main(["readout", "reproduce", "appendix-c6", "table4", "--models", "smollm2-135m-instruct", "--dry-run", "--dtype", "float16"], capsys)
    assert code == 0, err
    code, err = _main(["readout", "reproduce", "table8", "--dry-run", "--dtype", "float16"], capsys)  # no runs: it reads no tokenizer either
    assert code == 0 and "tokenizer" not in err, err
    said: list[str] = []
    cache = ModelCache(ModelSpec("smollm2-135m-instruct", dtype="float32"))
    res = reproduce("appendix-c6", tmp_path, models=["smollm2-135m-instruct"], limit=1, B=20, cache=cache, status=said.append)
    assert "Given and not read here (each checkpoint's tokenizer only, no weights): --dtype." in res.table.notes
    assert "appendix-c6: reads tokenizers only; --dtype not read here" in said


def test_a_tokenizer_only_table_takes_the_tokenizers_flags():
    """What C.6 reads of a spec (the checkpoint, its revision, its chat-template variables, and the
    always-set batch size) passes the check; a hub checkpoint keeps its pinned revision."""
    from sleight.readout.reproduce import ModelCache, load_table
    from sleight.readout.reproduce.runner import check_specs, select_checkpoints

    t = load_table("appendix-c6")
    for argv in ([], ["--chat-template-kwargs", '{"enable_thinking": false}', "--batch-size", "8"]):
        args = build_parser().parse_args(["readout", "reproduce", "appendix-c6", *argv])
        cks = select_checkpoints(t, None)
        check_specs([t], None, ModelCache(model_spec_from_args(args, model=cks[0].model, resolve_dtype=False)))
    assert ModelSpec("Qwen/Qwen3-4B", revision="abc").beyond_tokenizer() == []
    assert ModelSpec("Qwen/Qwen3-4B", engine="vllm", enforce_eager=True).beyond_tokenizer() == ["--engine", "--enforce-eager"]


def test_reproduce_hands_the_vllm_flags_to_each_checkpoints_spec():
    """The load flags a vllm checkpoint takes reach its spec (and so its load and its manifest)."""
    from sleight.readout.reproduce import ModelCache, load_table
    from sleight.readout.reproduce.runner import select_checkpoints

    args = build_parser().parse_args([
        "readout", "reproduce", "table4", "--engine", "vllm", "--quantization", "awq", "--dtype", "float16", "--load-format", "auto",
        "--enforce-eager", "--engine-args", '{"max_num_seqs": 8}', "--scorer", "twin", "--max-model-len", "2048",
    ])  # fmt: skip
    ck = select_checkpoints(load_table("table4"), ["smollm2-135m-instruct"])[0]
    spec = ModelCache(model_spec_from_args(args, model=ck.model)).spec(ck)
    assert (spec.engine, spec.quantization, spec.dtype, spec.load_format, spec.enforce_eager, spec.scorer, spec.max_model_len) == (
        "vllm", "awq", "float16", "auto", True, "twin", 2048,
    )
    assert spec.load_record() == {"quantization": "awq", "load_format": "auto", "scorer": "twin", "engine_args": {"max_num_seqs": 8}}


# -- issue #33 item 2: a tamper run's load settings are in its identity --------------------------------
def _started_run(tmp_path, spec: ModelSpec):
    """A run directory whose manifest the run's one config builder wrote (a run killed before its
    first question committed): the real store, the real config."""
    from sleight.rundir import versions
    from sleight.tamper.data import load_questions, load_substitutes
    from sleight.tamper.job import plan_run

    qs, subs = load_questions(limit=1)[0], load_substitutes(limit=2)[0]
    prep = plan_run(spec, qs, subs, tmp_path / "run")
    prep.store.open(prep.run_config, {"model_id": spec.model, "engine": spec.engine, "load": spec.load_record()}, {}, versions())
    prep.store.finish(False)
    return prep


@pytest.mark.parametrize(
    ("first", "then", "field"),
    [
        ([], ["--quantization", "fp8"], "load"),
        (["--quantization", "fp8"], ["--quantization", "awq"], "load.quantization"),
        (["--quantization", "fp8"], [], "load"),
        ([], ["--revision", "abc"], "load"),
        ([], ["--load-format", "safetensors"], "load"),
        ([], ["--scorer", "twin"], "load.scorer"),
        ([], ["--dtype", "bfloat16"], "dtype"),
    ],
)
def test_a_tamper_run_resumed_with_other_weights_is_refused_in_one_line(first, then, field, tmp_path, capsys):
    """Issue #33: a run resumed with another --quantization, --revision, --load-format or --scorer was
    resumed silently, two models' records mixed in one directory. Now the manifest records each, and a
    resume under others is refused in one line before any model loads."""
    base = ["--model", "org/name", "--engine", "vllm", "--questions", "1", "--substitutes", "2", "--no-progress"]
    prep = _started_run(tmp_path, model_spec_from_args(_args(*base, *first)))
    manifest = prep.store.read_manifest()
    assert manifest["config"].get("load", {}) == prep.spec.load_record()
    assert manifest["config"]["load"]["scorer"] == "engine" or "--scorer" in first
    code, err = _main(["tamper", "run", *base, *then, "--out", str(tmp_path / "run")], capsys)
    assert code == 2 and err.count("\n") == 1 and f"different config ({field}" in err, err


def test_the_manifest_records_each_load_setting(tmp_path):
    spec = ModelSpec("org/name", engine="vllm", revision="abc", quantization="bitsandbytes", dtype="bfloat16", engine_args={"max_num_seqs": 8})
    config = _started_run(tmp_path, spec).store.read_manifest()["config"]
    assert config["load"] == {
        "revision": "abc", "quantization": "bitsandbytes", "scorer": "engine", "engine_args": {"max_num_seqs": 8},
    }  # fmt: skip
    assert config["dtype"] == "bfloat16"
