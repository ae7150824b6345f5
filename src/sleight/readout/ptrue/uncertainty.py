"""Single-answer uncertainty estimators beside P(True): lm-polygraph's own classes on sleight's records.

lm-polygraph 0.7.0's default estimator set is ``examples/configs/estimators/default_estimators.yaml``
(50 entries). :data:`ESTIMATORS` are the entries computable from the model and its answers alone,
each run through the library's own class (``Estimator.__call__(stats)``) on a ``stats`` dict built
here from sleight's model layer, and each reported as its own column (named by the estimator's
``str()``; AttentionScore's ``str()`` adds the layer it resolves when called, so its column is the
class name). :data:`SKIPPED` are the entries that need something this package cannot compute (an
NLI or cross-encoder model, a training set, an IDF corpus, hidden states), each with its reason; a
run names them in its notes.

The statistics, as lm-polygraph's calculators define them:

* ``greedy_tokens``, ``greedy_log_likelihoods``, ``entropy`` -- the greedy answer's token ids, each
  token's log-probability and the entropy of the full next-token distribution at its position; an
  answer that ended by the model's choice includes its end-of-sequence token, as
  ``GreedyProbsCalculator`` does (``stat_calculators/greedy_probs.py`` 152-178), one cut by the budget
  has none. Plain log-softmax: the library also masks EOS in the first two steps (``min_new_tokens=2``).
* ``greedy_log_probs`` -- the full log-softmax at each of those positions (only engines that can
  ship a whole vocabulary to Python: ``next_token_logprobs``; else the four estimators that need it
  are skipped with a note).
* ``greedy_lm_log_likelihoods`` -- ``log p(y_t | y_<t)``, the answer's tokens without the question
  (``GreedyLMProbsCalculator``'s docstring, ``stat_calculators/greedy_lm_probs.py`` 35-38); NaN at
  ``t = 0``, which both estimators that read it leave out. The library's calculator re-tokenises the
  decoded answer through ``model.tokenize`` (the chat template, for an instruct model) and reads the
  logit row of each token's own position; that is not reproduced.
* ``sample_tokens``, ``sample_texts``, ``sample_log_likelihoods``, ``sample_log_probs`` --
  ``SamplingGenerationCalculator`` (``stat_calculators/sample.py`` 140-229): ``samples_n`` answers
  sampled per question (default 10, line 149) with the library's sampling parameters
  (:class:`~sleight.readout.ptrue.answers.Sampling`, ``min_new_tokens=2``); per sample the drawn
  tokens before EOS, their log-probabilities under the unwarped model (EOS masked in the first two
  steps, as the library's scores processor sees them), and their sum *including* the EOS token.
  Drawn as :func:`~sleight.readout.ptrue.answers.sampled_answers` draws (top-k read, numpy stream per
  question and sample).
* ``forwardpass_attention_weights``, ``attention_all``, ``attention_weights_eliciting_prompt`` --
  eager-attention forward passes on the transformers engine (:mod:`.attention`), for AttentionScore,
  RAUQ and CSL; other engines report no attention weights, and a run notes those four.
* ``p_true`` -- the Library P(True) readout (:mod:`.readouts`); ``p_true_sampling`` -- the same
  reading of ``SamplingPromptCalculator``'s prompt (``stat_calculators/prompt.py`` 130-145), the
  samples joined by ``", "``.

Where lm-polygraph is not installed, only :data:`TOKEN_ESTIMATORS` are computed, here; each of them
is held equal to the library's class on the same statistics (``tests/test_estimators.py``).
All values are uncertainties: higher means less sure, so ``-value`` is the confidence ranked against
correctness.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, TypedDict

import numpy as np

from sleight.backends.base import FullDistribution, Generation, LanguageModel
from sleight.readout.ptrue.answers import Sampling
from sleight.readout.ptrue.attention import attention_stats, supports_attention
from sleight.readout.ptrue.readouts import polygraph_logprob
from sleight.stats.downstream import JsonRecord, MetricInterval, PairedDifference

POLYGRAPH_VERSION = "0.7.0"
DEFAULT_SAMPLES = 10  # SamplingGenerationCalculator(samples_n=10), stat_calculators/sample.py line 149
PTRUE_SAMPLING_TEMPLATE = (
    "Question: {q}\n Here are some ideas that were brainstormed: {s}\n Possible answer:{a}\n "
    "Is the possible answer:\n (A) True\n (B) False\n The possible answer is:"
)  # SamplingPromptCalculator, stat_calculators/prompt.py 139-142


@dataclass(frozen=True)
class AnswerTokens:
    """The records of one greedy answer: per token its log-probability and the entropy there."""

    token_ids: tuple[int, ...]
    logprobs: tuple[float, ...]
    entropies: tuple[float, ...]
    ended: bool  # the model chose to stop (its end-of-sequence token is the last record)


# -- the project's own three (kept: tests/test_estimators.py holds them equal to the library's) ---


def maximum_sequence_probability(a: AnswerTokens) -> float:
    return float(-np.sum(np.asarray(a.logprobs, dtype=np.float64)))


def perplexity(a: AnswerTokens) -> float:
    return float(-np.mean(np.asarray(a.logprobs, dtype=np.float64))) if a.logprobs else float("nan")


def mean_token_entropy(a: AnswerTokens) -> float:
    return float(np.mean(np.asarray(a.entropies, dtype=np.float64))) if a.entropies else float("nan")


TOKEN_ESTIMATORS: dict[str, Callable[[AnswerTokens], float]] = {
    "MaximumSequenceProbability": maximum_sequence_probability,
    "Perplexity": perplexity,
    "MeanTokenEntropy": mean_token_entropy,
}


# -- lm-polygraph's default set ---------------------------------------------------------------------


@dataclass(frozen=True)
class EstimatorEntry:
    """One entry of ``default_estimators.yaml`` (v0.7.0): the library class, its config, its lines."""

    column: str  # the estimator's str(): the column it is reported under
    cls: str
    lines: str  # lines of examples/configs/estimators/default_estimators.yaml at v0.7.0
    needs: str  # "greedy" | "distributions" | "attention" | "samples" | "ptrue" | "ptrue_sampling"
    kwargs: Mapping[str, Any] = field(default_factory=dict)

    def build(self) -> Any:
        import lm_polygraph.estimators as lib  # type: ignore[import-untyped,import-not-found,unused-ignore]

        return getattr(lib, self.cls)(**dict(self.kwargs))


def _lex(metric: str, lines: str) -> EstimatorEntry:
    return EstimatorEntry(f"LexicalSimilarity_{metric}", "LexicalSimilarity", lines, "samples", {"metric": metric})


def _jaccard(cls: str, lines: str) -> EstimatorEntry:
    return EstimatorEntry(f"{cls}_Jaccard_score", cls, lines, "samples", {"similarity_score": "Jaccard_score"})


ESTIMATORS: tuple[EstimatorEntry, ...] = (
    EstimatorEntry("MaximumSequenceProbability", "MaximumSequenceProbability", "1", "greedy"),
    EstimatorEntry("Perplexity", "Perplexity", "2", "greedy"),
    EstimatorEntry("MeanTokenEntropy", "MeanTokenEntropy", "3", "greedy"),
    EstimatorEntry("MeanPointwiseMutualInformation", "MeanPointwiseMutualInformation", "4", "greedy"),
    EstimatorEntry("SelfCertainty", "SelfCertainty", "5", "distributions"),
    EstimatorEntry("MeanConditionalPointwiseMutualInformation", "MeanConditionalPointwiseMutualInformation", "6", "greedy"),
    EstimatorEntry("PTrue", "PTrue", "8", "ptrue"),
    EstimatorEntry("PTrueSampling", "PTrueSampling", "9", "ptrue_sampling"),
    EstimatorEntry("MonteCarloSequenceEntropy", "MonteCarloSequenceEntropy", "10", "samples"),
    EstimatorEntry("MonteCarloNormalizedSequenceEntropy", "MonteCarloNormalizedSequenceEntropy", "11", "samples"),
    _lex("rouge1", "12-14"),
    _lex("rouge2", "15-17"),
    _lex("rougeL", "18-20"),
    _lex("BLEU", "21-23"),
    _jaccard("EigValLaplacian", "33-35"),
    _jaccard("DegMat", "44-46"),
    _jaccard("Eccentricity", "55-57"),
    EstimatorEntry("RenyiNeg", "RenyiNeg", "68", "distributions"),
    EstimatorEntry("FisherRao", "FisherRao", "69", "distributions"),
    EstimatorEntry("AttentionScore", "AttentionScore", "91-93", "attention", {"gen_only": False}),
    EstimatorEntry("RAUQ", "RAUQ", "94-97", "attention", {"alpha": 0.2, "use_entropy": False}),
    EstimatorEntry("RAUQ (entropy)", "RAUQ", "98-101", "attention", {"alpha": 0.8, "use_entropy": True}),
    EstimatorEntry("CSL", "CSL", "102", "attention"),
    EstimatorEntry("BoostedProbSequence", "BoostedProbSequence", "107", "distributions"),
)
ESTIMATOR_COLUMNS: tuple[str, ...] = tuple(e.column for e in ESTIMATORS)

# The other entries of default_estimators.yaml (v0.7.0), with what each needs that is not computed here.
_NLI = "an NLI model (DeBERTa-large-MNLI from the hub) over the samples"
SKIPPED: tuple[tuple[str, str, str], ...] = (
    ("ClaimConditionedProbability", "7", "an NLI model over the greedy answer's alternatives (greedy_tokens_alternatives_nli)"),
    ("NumSemSets", "24", _NLI),
    ("EigValLaplacian (NLI_score, entail and contra)", "25-32", _NLI),
    ("DegMat (NLI_score, entail and contra)", "36-43", _NLI),
    ("Eccentricity (NLI_score, entail and contra)", "47-54", _NLI),
    ("SemanticEntropy (both entropy estimations)", "58-61", _NLI + " (semantic classes)"),
    ("SAR, TokenSAR, SentenceSAR", "62-64", "a cross-encoder similarity model"),
    ("LUQ, KernelLanguageEntropy", "65-66", _NLI),
    ("EigenScore", "67", "the model's hidden states for each sample (no engine here reports hidden states)"),
    ("MahalanobisDistanceSeq, RelativeMahalanobisDistanceSeq, RDESeq, PPLMDSeq (MD, RMD)", "70-78", "a training set's embeddings"),
    ("Focus", "79-90", "an IDF table from a 100M-token corpus (RedPajama) and spaCy's en_core_web_sm"),
    ("CocoaMSP, CocoaPPL, CocoaMTE", "103-105", "a cross-encoder similarity between the greedy answer and the samples"),
    ("SemanticDensity", "106", _NLI),
)


def polygraph_version() -> str | None:
    try:
        from importlib.metadata import version

        return version("lm-polygraph")
    except Exception:  # not installed
        return None


def polygraph_available() -> bool:
    try:
        import lm_polygraph.estimators  # type: ignore[import-untyped,import-not-found,unused-ignore]  # noqa: F401
    except ImportError:
        return False
    return True


# -- the statistics -----------------------------------------------------------------------------------


def answer_tokens(model: LanguageModel, prompts: Sequence[Sequence[int]], gens: Sequence[Generation]) -> list[AnswerTokens]:
    """Token records of greedy answers; for an answer that stopped, one more read at its end gives
    the end-of-sequence token's log-probability and the entropy there (one batched pass)."""
    eos = min(model.eos_ids)
    stopped = [k for k, g in enumerate(gens) if g.finish_reason == "stop"]
    ends = model.read_next([list(prompts[k]) + list(gens[k].token_ids) for k in stopped], [[eos]] * len(stopped), top_k=1) if stopped else []
    at_end = {k: nt for k, nt in zip(stopped, ends)}
    out = []
    for k, g in enumerate(gens):
        ids, lps, ents = list(g.token_ids), [float(v) for v in g.logprobs], [float(v) for v in g.entropy]
        if k in at_end:
            ids.append(eos)
            lps.append(float(at_end[k].logprobs[0]))
            ents.append(float(at_end[k].entropy))
        out.append(AnswerTokens(tuple(ids), tuple(lps), tuple(ents), k in at_end))
    return out


class GreedyStats(TypedDict):
    """The greedy answers' statistics under lm-polygraph's own names (the library's estimators read
    them from its stats dictionary, which this is, unchanged)."""

    greedy_tokens: list[list[int]]
    greedy_log_likelihoods: list[np.ndarray]
    entropy: list[np.ndarray]


class SampleStats(TypedDict):
    """The sampled answers' statistics under lm-polygraph's own names (:func:`sample_stats`)."""

    sample_tokens: list[list[list[int]]]
    sample_texts: list[list[str]]
    sample_log_likelihoods: list[list[list[float]]]
    sample_log_probs: list[list[float]]


class PolygraphStats(GreedyStats, total=False):
    """lm-polygraph's stats dictionary as :func:`estimate` fills it for the library's estimators:
    the greedy statistics, then what the estimators asked for need (samples, P(True) readings)."""

    greedy_lm_log_likelihoods: list[np.ndarray]
    p_true: np.ndarray
    sample_tokens: list[list[list[int]]]
    sample_texts: list[list[str]]
    sample_log_likelihoods: list[list[list[float]]]
    sample_log_probs: list[list[float]]
    p_true_sampling: np.ndarray


def greedy_stats(answers: Sequence[AnswerTokens]) -> GreedyStats:
    """``greedy_tokens``, ``greedy_log_likelihoods`` and ``entropy`` from the greedy records (float64)."""
    return GreedyStats(
        greedy_tokens=[list(a.token_ids) for a in answers],
        greedy_log_likelihoods=[np.asarray(a.logprobs, dtype=np.float64) for a in answers],
        entropy=[np.asarray(a.entropies, dtype=np.float64) for a in answers],
    )


def lm_log_likelihoods(model: LanguageModel, answers: Sequence[AnswerTokens]) -> list[np.ndarray]:
    """``greedy_lm_log_likelihoods``: ``log p(y_t | y_<t)`` of each answer's tokens without the question
    (NaN at ``t = 0``, where there is no context)."""
    out = []
    for a in answers:
        ids = list(a.token_ids)
        rest = model.continuation_logprobs(ids[:1], [ids[1:]])[0] if len(ids) > 1 else np.zeros(0)
        out.append(np.concatenate([[np.nan], np.asarray(rest, dtype=np.float64)]))
    return out


def greedy_distributions(model: LanguageModel, prompts: Sequence[Sequence[int]], answers: Sequence[AnswerTokens]) -> list[np.ndarray] | None:
    """``greedy_log_probs``: the full log-softmax (float64) at each answer position, or None where the
    engine cannot ship a whole vocabulary (no ``next_token_logprobs``)."""
    if not isinstance(model, FullDistribution):
        return None
    seqs = [list(p) + list(a.token_ids[:k]) for p, a in zip(prompts, answers) for k in range(len(a.token_ids))]
    rows = np.asarray(model.next_token_logprobs(seqs), dtype=np.float64) if seqs else np.zeros((0, model.vocab_size))
    out, at = [], 0
    for a in answers:
        out.append(rows[at : at + len(a.token_ids)])
        at += len(a.token_ids)
    return out


@dataclass(frozen=True)
class Samples:
    """One question's sampled answers, as ``SamplingGenerationCalculator`` records them."""

    tokens: tuple[tuple[int, ...], ...]  # per sample, the tokens before EOS
    log_likelihoods: tuple[tuple[float, ...], ...]  # per sample, those tokens' log-probabilities
    log_probs: tuple[float, ...]  # per sample, their sum plus the EOS token's where it ended
    texts: tuple[str, ...]


def sample_answers(
    model: LanguageModel,
    prompts: Sequence[Sequence[int]],
    n: int,
    max_new_tokens: int,
    sampling: Sampling,
) -> list[Samples]:
    """``n`` sampled answers per prompt from :meth:`LanguageModel.sample` (KV-cached, seeded per
    prompt), recorded as ``SamplingGenerationCalculator`` records them.

    The log-probabilities are the model's own (unwarped), with the EOS ids masked in the first
    ``min_new_tokens`` steps as the library's scores processor sees them (:func:`polygraph_logprob`);
    a sample that ended by the model's choice adds its EOS token's log-probability to its sum. Both
    need the EOS log-probs at those positions: one batched ``read_next``. A sample with no token
    before EOS is dropped, as the library drops it."""
    drawn = model.sample(prompts, max_new_tokens, n=n, sampling=sampling)
    eos = sorted(model.eos_ids)
    # positions whose EOS log-probs are needed: the first min_new_tokens of each sample, and its end
    want = [
        (i, j, k)
        for i, per in enumerate(drawn)
        for j, smp in enumerate(per)
        for k in sorted({*range(min(sampling.min_new_tokens, len(smp.token_ids))), *([len(smp.token_ids)] if smp.finish_reason == "stop" else [])})
    ]
    reads = model.read_next([list(prompts[i]) + list(drawn[i][j].token_ids[:k]) for i, j, k in want], [eos] * len(want), top_k=0) if want else []
    eos_lp = {w: [float(v) for v in r.logprobs] for w, r in zip(want, reads)}
    out = []
    for i, per in enumerate(drawn):
        toks, lls, total = [], [], []
        for j, smp in enumerate(per):
            lp = [
                polygraph_logprob(float(v), eos_lp[(i, j, k)]) if k < sampling.min_new_tokens else float(v)
                for k, v in enumerate(smp.logprobs)
            ]
            if not smp.token_ids:
                continue
            end = len(smp.token_ids)
            tail = float(np.logaddexp.reduce(eos_lp[(i, j, end)])) if smp.finish_reason == "stop" and end >= sampling.min_new_tokens else 0.0
            toks.append(tuple(int(t) for t in smp.token_ids))
            lls.append(tuple(lp))
            total.append(sum(lp) + tail)
        out.append(Samples(tuple(toks), tuple(lls), tuple(total), tuple(model.decode(t) for t in toks)))
    return out


def sample_stats(samples: Sequence[Samples]) -> SampleStats:
    return SampleStats(
        sample_tokens=[[list(t) for t in s.tokens] for s in samples],
        sample_texts=[list(s.texts) for s in samples],
        sample_log_likelihoods=[[list(v) for v in s.log_likelihoods] for s in samples],
        sample_log_probs=[list(s.log_probs) for s in samples],
    )


def ptrue_sampling_logprobs(
    model: LanguageModel, questions: Sequence[str], answers: Sequence[str], samples: Sequence[Samples], *, instruct: bool = True
) -> np.ndarray:
    """``p_true_sampling``: log p(``True``) at the next position of ``SamplingPromptCalculator``'s
    prompt, read as the Library readout reads its own (the first id of ``True`` encoded alone, EOS
    masked: :func:`polygraph_logprob`)."""
    true_id = model.encode("True")[0]
    eos = sorted(model.eos_ids)
    prompts = [PTRUE_SAMPLING_TEMPLATE.format(q=q, s=", ".join(s.texts), a=a) for q, a, s in zip(questions, answers, samples)]
    ctx = [model.render_chat([{"role": "user", "content": p}]).text if instruct else p for p in prompts]
    reads = model.read_next([model.encode(c) for c in ctx], [[true_id, *eos]] * len(ctx), top_k=1)
    return np.asarray([polygraph_logprob(float(r.logprobs[0]), [float(v) for v in r.logprobs[1:]]) for r in reads], dtype=np.float64)


# -- the values -----------------------------------------------------------------------------------------


def library_values(stats: Mapping[str, Any], entries: Sequence[EstimatorEntry] = ESTIMATORS) -> dict[str, np.ndarray]:
    """Each entry's value per answer, computed by lm-polygraph's own class on ``stats`` (nltk's BLEU
    warns on every pair without 3- or 4-gram overlaps; those warnings are silenced)."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return {e.column: np.asarray(e.build()(dict(stats)), dtype=np.float64) for e in entries}


def own_values(answers: Sequence[AnswerTokens]) -> dict[str, np.ndarray]:
    """The three computed here (where lm-polygraph is not installed, or not asked for)."""
    return {name: np.asarray([fn(a) for a in answers], dtype=np.float64) for name, fn in TOKEN_ESTIMATORS.items()}


DISTRIBUTION_CHUNK = 16  # answers whose full distributions (V floats per token) and attention weights are held at once


def estimate(
    model: LanguageModel,
    prompts: Sequence[Sequence[int]],
    answers: Sequence[AnswerTokens],
    *,
    questions: Sequence[str],
    answer_texts: Sequence[str],
    keys: Sequence[str],
    p_true: Sequence[float] | np.ndarray,
    instruct: bool = True,
    max_new_tokens: int = 32,
    samples: int = DEFAULT_SAMPLES,
    sampling: Sampling | None = None,
    use_polygraph: bool = True,
) -> tuple[dict[str, np.ndarray], str, list[str]]:
    """Each estimator's value per answer, who computed them (``lm-polygraph X`` or ``sleight``), and
    one note per default entry not computed (with its reason)."""
    if not (use_polygraph and polygraph_available()):
        why = "lm-polygraph not installed" if use_polygraph else "lm-polygraph not asked for"
        notes = [f"{e.column}: not computed ({why}; pip install 'sleight[polygraph]')" for e in ESTIMATORS if e.column not in TOKEN_ESTIMATORS]
        return own_values(answers), "sleight", notes + skipped_notes()
    stats = PolygraphStats(**greedy_stats(answers), greedy_lm_log_likelihoods=lm_log_likelihoods(model, answers))
    stats["p_true"] = np.asarray(p_true, dtype=np.float64)
    entries = [e for e in ESTIMATORS if e.needs in ("greedy", "ptrue")]
    notes = []
    if samples > 1:
        drawn = sample_answers(model, prompts, samples, max_new_tokens, sampling or Sampling())
        sampled = sample_stats(drawn)
        stats["sample_tokens"], stats["sample_texts"] = sampled["sample_tokens"], sampled["sample_texts"]
        stats["sample_log_likelihoods"], stats["sample_log_probs"] = sampled["sample_log_likelihoods"], sampled["sample_log_probs"]
        stats["p_true_sampling"] = ptrue_sampling_logprobs(model, questions, answer_texts, drawn, instruct=instruct)
        entries += [e for e in ESTIMATORS if e.needs in ("samples", "ptrue_sampling")]
    else:
        notes += [f"{e.column}: not computed (needs at least 2 samples per question)" for e in ESTIMATORS if e.needs in ("samples", "ptrue_sampling")]
    values = library_values(stats, entries)
    full = [e for e in ESTIMATORS if e.needs == "distributions"]
    att = [e for e in ESTIMATORS if e.needs == "attention"]
    if not isinstance(model, FullDistribution):
        notes += [f"{e.column}: not computed (needs the full next-token distribution, which this engine does not ship)" for e in full + att]
        full, att = [], []
    if att and not supports_attention(model):
        notes += [f"{e.column}: not computed (needs the model's attention weights, which only the transformers engine reports)" for e in att]
        att = []
    values.update(position_values(model, prompts, answers, questions, stats, full + att))
    ordered = {e.column: values[e.column] for e in ESTIMATORS if e.column in values}
    return ordered, f"lm-polygraph {polygraph_version()}", notes + skipped_notes()


def position_values(
    model: LanguageModel,
    prompts: Sequence[Sequence[int]],
    answers: Sequence[AnswerTokens],
    questions: Sequence[str],
    stats: GreedyStats,
    entries: Sequence[EstimatorEntry],
) -> dict[str, np.ndarray]:
    """The entries that read per-position arrays (full distributions; attention weights, which RAUQ's
    entropy variant reads beside the distributions' width), a chunk of answers at a time so that only
    one chunk's arrays are held."""
    parts: dict[str, list[np.ndarray]] = {e.column: [] for e in entries}
    attention = any(e.needs == "attention" for e in entries)
    for at in range(0, len(answers) if entries else 0, DISTRIBUTION_CHUNK):
        sl = slice(at, at + DISTRIBUTION_CHUNK)
        sub: dict[str, Any] = {k: stats[k][sl] for k in ("greedy_tokens", "greedy_log_likelihoods", "entropy")}
        sub["greedy_log_probs"] = greedy_distributions(model, prompts[sl], answers[sl])
        if attention:
            sub.update(attention_stats(model, prompts[sl], sub["greedy_tokens"], questions[sl]))
        for col, v in library_values(sub, entries).items():
            parts[col].append(v)
    return {col: np.concatenate(v) if v else np.zeros(0) for col, v in parts.items()}


def skipped_notes() -> list[str]:
    return [f"{name} (default_estimators.yaml {lines}): skipped, needs {why}" for name, lines, why in SKIPPED]


def comparison(
    labels: Sequence[float],
    clusters: Sequence[Any],
    uncertainties: Mapping[str, Any],
    ptrue: Mapping[str, Sequence[float | None]],
    *,
    B: int = 20000,
    seed: int = 0,
    level: float = 0.95,
) -> Comparison:
    """AUROC and PRR of every estimator (confidence = -uncertainty) and every P(True) readout, and
    the paired difference of each P(True) readout against each estimator (same replicates).

    Each pair is scored on the answers where both are defined.
    """
    from sleight.stats.downstream import cluster_codes, metric_interval, paired_difference

    y = np.asarray(labels, dtype=np.float64)
    cl = cluster_codes(list(clusters))
    conf = {k: -np.asarray(v, dtype=np.float64) for k, v in uncertainties.items()}
    pt = {k: np.asarray([np.nan if v is None else v for v in vals], dtype=np.float64) for k, vals in ptrue.items()}

    def metrics(s: np.ndarray) -> dict[str, MetricInterval | None]:
        ok = np.isfinite(s)
        return {m: metric_interval(m, s[ok], y[ok], clusters=cl[ok], B=B, seed=seed, level=level) if ok.any() else None for m in ("auroc", "prr")}

    differences: dict[str, dict[str, PairedDifference | None]] = {}
    for r, s in pt.items():
        for e, c in conf.items():
            ok = np.isfinite(s) & np.isfinite(c)
            differences[f"{r} - {e}"] = {
                m: paired_difference(m, s[ok], c[ok], y[ok], clusters=cl[ok], B=B, seed=seed, level=level, name_a=r, name_b=e) if ok.any() else None
                for m in ("auroc", "prr")
            }
    return Comparison(
        int(y.size), int(y.sum()), {k: metrics(v) for k, v in conf.items()}, {k: metrics(v) for k, v in pt.items()}, differences
    )


@dataclass(frozen=True)
class Comparison(JsonRecord):
    """P(True) beside the estimators (:func:`comparison`): per scorer, AUROC and PRR by metric name
    (None where the scorer is defined on no answer), and per ``"readout - estimator"`` pair the
    paired differences by metric name; field names and order are estimators.json's ``summary`` keys."""

    n: int
    n_correct: int
    estimators: Mapping[str, Mapping[str, MetricInterval | None]]
    ptrue: Mapping[str, Mapping[str, MetricInterval | None]]
    differences: Mapping[str, Mapping[str, PairedDifference | None]]

    def as_json(self) -> dict[str, object]:
        return {f.name: getattr(self, f.name) for f in fields(self)}
