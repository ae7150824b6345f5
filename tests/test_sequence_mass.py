"""App. F's encoder–decoder reading (issue #34): the decoder reopened from ``<pad>`` under the encoder's
prompt, the relevance labels read as whole sequences, summed; and the same quantity on a decoder-only
model, each label after the prompt.

The encoder–decoder is a tiny hand-built T5 (random weights, a word-level SentencePiece-style vocabulary
whose leading-space marker makes bare and spaced labels the same tokens, as the Flan vocabularies do),
saved as a folder and loaded as any checkpoint: its masses are checked against transformers' own
forward pass with ``labels`` (which shifts the targets right behind the decoder start token itself)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from tolerances import LOGPROB_ATOL, MASS_ATOL

LABELS = ("Highly Relevant", "Somewhat Relevant", "Not Relevant")  # App. F: Zhuang et al.'s relevance labels
WORDS = ["Highly", "Somewhat", "Not", "Relevant", "Output:", "Query:", "Document:", "the", "a", "of", "is", "Relevant?"]


@pytest.fixture(scope="module")
def tiny_t5(tmp_path_factory):
    """A two-layer T5 with a 16-word vocabulary, saved with its tokenizer (pad 0 = decoder start, </s> 1)."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast, T5Config, T5ForConditionalGeneration

    vocab = {"<pad>": 0, "</s>": 1, "<unk>": 2, **{"▁" + w: i + 3 for i, w in enumerate(WORDS)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    tok.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", 1)])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="</s>", unk_token="<unk>")
    torch.manual_seed(0)
    config = T5Config(
        vocab_size=len(vocab), d_model=16, d_ff=32, d_kv=8, num_heads=2, num_layers=2, num_decoder_layers=2,
        decoder_start_token_id=0, pad_token_id=0, eos_token_id=1, tie_word_embeddings=False,
    )
    folder = tmp_path_factory.mktemp("tiny-t5")
    T5ForConditionalGeneration(config).save_pretrained(folder)
    fast.save_pretrained(folder)
    return folder


def _reference_logprobs(folder, text: str, label: str) -> np.ndarray:
    """The label's per-token log-probs from transformers' own seq2seq forward with ``labels``."""
    import torch
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForSeq2SeqLM.from_pretrained(folder, dtype=torch.float32).eval()
    enc = tok(text, return_tensors="pt")
    target = torch.tensor([tok(label, add_special_tokens=False)["input_ids"]])
    with torch.no_grad():
        logits = model(input_ids=enc["input_ids"], labels=target).logits
    lp = torch.log_softmax(logits.double(), dim=-1)[0]
    return lp[torch.arange(target.shape[1]), target[0]].numpy()


def test_a_t5_folder_reads_sequence_masses_equal_to_transformers_own_pass(tiny_t5):
    """App. F: the sequence mass is the labels' summed sequence probabilities at a decoder reopened from
    <pad>, the bare and spaced labels are the same tokens, and the argmax is read at the first position."""
    from sleight.backends.seq2seq import is_encoder_decoder, load_seq2seq
    from sleight.backends.spec import ModelSpec
    from sleight.readout.audit.items import AuditItem
    from sleight.readout.scan.sequence_mass import EncoderDecoderReader, read_item

    spec = ModelSpec(str(tiny_t5))
    assert is_encoder_decoder(spec)
    model = load_seq2seq(spec)
    assert model.start == 0 and model.info.engine == "hf" and model.info.dtype == "float32"
    text = "Query: the a of\nDocument: is the Relevant?\nOutput:"
    assert model.encode_input(text)[-1] == 1  # the encoder's input closes with </s>
    item = AuditItem("i0", ({"role": "user", "content": text},), options=LABELS, chat_template=False)
    row = read_item(EncoderDecoderReader(model), "relevance", item)

    want = [_reference_logprobs(tiny_t5, text, label) for label in LABELS]
    first, got = model.target_logprobs(model.encode_input(text), [model.encode_target(label) for label in LABELS])
    for g, w in zip(got, want):
        assert np.abs(g - w).max() <= LOGPROB_ATOL
    assert row.mass == pytest.approx(sum(math.exp(w.sum()) for w in want), abs=MASS_ATOL)
    assert row.encoder_decoder and row.targets_identical and row.mass_spaced == row.mass
    assert row.argmax_option == (int(np.argmax(first)) in {model.encode_target(label)[0] for label in LABELS})
    # the first position's distribution is the decoder's at <pad>: the same as each label's first token reads
    for g, label in zip(got, LABELS):
        assert g[0] == pytest.approx(first[model.encode_target(label)[0]], abs=LOGPROB_ATOL)
    # --batch-size caps the decoder rows per pass (recorded), and the reading does not depend on it
    one = load_seq2seq(spec.with_(batch_size=1))
    assert one.info.batch_size == 1 and model.info.batch_size == spec.batch_size
    first_one, got_one = one.target_logprobs(one.encode_input(text), [one.encode_target(label) for label in LABELS])
    assert np.abs(first_one - first).max() <= LOGPROB_ATOL
    for g, w in zip(got_one, want):
        assert np.abs(g - w).max() <= LOGPROB_ATOL


def test_the_bundled_decoder_only_model_reads_each_label_after_the_prompt(model):
    """A decoder-only checkpoint: each label encoded as a continuation of the prompt and read after it;
    on SmolLM2's byte-level vocabulary the spaced labels are other tokens (App. F's identity is the Flan
    vocabularies')."""
    import torch

    from sleight.position import encode_continuation
    from sleight.readout.audit.items import AuditItem
    from sleight.readout.scan.sequence_mass import DecoderOnlyReader, read_item

    text = "Query: what is read\nDocument: a passage about the sea.\nOutput:"
    item = AuditItem("i0", ({"role": "user", "content": text},), options=LABELS, chat_template=False)
    row = read_item(DecoderOnlyReader(model), "relevance", item)
    assert not row.encoder_decoder and not row.targets_identical

    ctx = model.encode(text)
    with torch.no_grad():
        masses = {}
        for prefix in ("", " "):
            total = 0.0
            for label in LABELS:
                ids = encode_continuation(model, text, prefix + label)
                assert ids
                logits = model.model(input_ids=torch.tensor([ctx + ids])).logits[0].double()
                lp = torch.log_softmax(logits, dim=-1)
                total += math.exp(sum(float(lp[len(ctx) - 1 + j, t]) for j, t in enumerate(ids)))
            masses[prefix] = total
        argmax = int(model.model(input_ids=torch.tensor([ctx])).logits[0, -1].argmax())
    assert row.mass == pytest.approx(masses[""], abs=MASS_ATOL) and row.mass_spaced == pytest.approx(masses[" "], abs=MASS_ATOL)
    assert row.argmax_option == (argmax in {encode_continuation(model, text, label)[0] for label in LABELS})  # type: ignore[index]


def test_an_encoder_decoder_is_refused_on_another_engine_in_one_line(tiny_t5):
    from sleight.backends.seq2seq import is_encoder_decoder, load_seq2seq
    from sleight.backends.spec import ModelSpec
    from sleight.errors import UserError

    with pytest.raises(UserError, match="hf engine only") as err:
        load_seq2seq(ModelSpec(str(tiny_t5), engine="vllm"))
    assert "\n" not in str(err.value)
    with pytest.raises(UserError, match="no chat template"):
        load_seq2seq(ModelSpec(str(tiny_t5), chat_template_kwargs={"enable_thinking": False}))
    assert not is_encoder_decoder(ModelSpec("smollm2-135m-instruct"))


def test_appendix_f_config_as_printed():
    """App. F prints the three Flan medians, an option argmax on every item and identical targets."""
    from sleight.readout.reproduce import load_table

    t = load_table("appendix-f")
    assert t.paper == {
        "flan-ul2": {"mass": 0.99904, "argmax_option": 64, "targets_identical": 64},
        "flan-t5-xl": {"mass": 0.99883, "argmax_option": 64, "targets_identical": 64},
        "flan-t5-xxl": {"mass": 0.99864, "argmax_option": 64, "targets_identical": 64},
    }
    run = t.runs["labels"]
    assert run.command == "sequence-mass" and run.items == 64 and dict(run.settings) == {"preset": "relevance"}
    assert [c.model for c in t.checkpoints] == ["google/flan-ul2", "google/flan-t5-xl", "google/flan-t5-xxl"]
    assert "App. F" in t.section and "</s>" in t.inferred and "revision" in t.inferred


def test_reproduce_appendix_f_on_a_t5_folder_writes_the_table_and_resumes(tiny_t5, tmp_path, monkeypatch):
    """``reproduce appendix-f --models <folder>``: the encoder–decoder path end to end, its readings
    marked encoder_decoder, the reproduced cells the run's own, a rerun reading the finished run."""
    import pyarrow.parquet as pq

    from sleight.readout.reproduce import reproduce

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    res = reproduce("appendix-f", tmp_path, models=[str(tiny_t5)], limit=2, B=20, status=lambda _m: None)
    name = res.table.rows[0].name
    readings = pq.read_table(tmp_path / "appendix-f" / name / "labels" / "readings.parquet").to_pylist()
    assert len(readings) == 2 and all(r["encoder_decoder"] and r["targets_identical"] for r in readings)
    cells = json.loads((tmp_path / "appendix-f" / "table.json").read_text(encoding="utf-8"))
    assert "appendix-f" in json.dumps(cells)
    row = res.table.rows[0]
    assert row.cells["targets_identical"].estimate == 2
    assert row.cells["mass"].estimate == pytest.approx(float(np.median([r["mass"] for r in readings])), abs=MASS_ATOL)
    manifest = json.loads((tmp_path / "appendix-f" / name / "labels" / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["config"]["encoder_decoder"] is True
    again = reproduce("appendix-f", tmp_path, models=[str(tiny_t5)], limit=2, B=20, status=lambda _m: None)
    assert again.table.rows[0].cells["mass"].estimate == row.cells["mass"].estimate


@pytest.mark.parametrize("hub_id", ["google/flan-t5-xl", "google/flan-t5-xxl", "google/flan-ul2"])
def test_the_flan_shapes_count_as_transformers_builds_them(hub_id):
    """App. F's checkpoints in the dry run's memory plan: weights by tensor from the shipped shapes,
    equal to transformers' own T5 built from them on the meta device (no weights read)."""
    import torch
    from transformers import T5Config, T5ForConditionalGeneration

    from sleight.backends import memory as mem
    from sleight.backends.architectures import architecture

    arch = architecture(hub_id)
    assert arch is not None and arch.config["is_encoder_decoder"] is True
    with torch.device("meta"):
        model = T5ForConditionalGeneration(T5Config(**dict(arch.config)))
        # transformers ties T5's output layer to the embedding when it builds one, and unties it when a
        # checkpoint holds both with different values (Flan-T5 and UL2 do): the loaded model's shapes
        model.lm_head.weight = torch.nn.Parameter(torch.empty_like(model.shared.weight))
    assert arch.config["tie_word_embeddings"] is False
    assert sum(t.params for t in mem.tensors(arch.config)) == sum(p.numel() for p in model.parameters())


def test_the_tiny_t5s_shapes_count_as_its_own_parameters(tiny_t5):
    from transformers import AutoModelForSeq2SeqLM

    from sleight.backends import memory as mem
    from sleight.backends.architectures import architecture

    arch = architecture(str(tiny_t5))  # the folder's own config.json
    assert arch is not None
    model = AutoModelForSeq2SeqLM.from_pretrained(tiny_t5)
    assert sum(t.params for t in mem.tensors(arch.config)) == sum(p.numel() for p in model.parameters())
