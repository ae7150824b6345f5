"""How llama.cpp's server settings move a quantized model's numbers (docs/engines.md, "llama.cpp's server").

    python benchmarks/llama_settings.py        # ~1 minute; needs .venv/bin/llama-server (make test-deps)

The bundled SmolLM2 Q4_1 GGUF served by ``llama-server`` and read by sleight's served engine,
against llama.cpp in process (llama-cpp-python's ``Llama``, the same source): the largest
|log-prob difference| over the top-20 and five asked ids at the next position of six prompts, for
one slot with flash attention off (the tests' server), four slots with four requests in flight,
and flash attention on (``-fa auto``); then, on the one-slot server, a prompt read after its prefix
was cached (``cache_prompt``, which the engine never sends) and a reply's positions read in one
batch against the same positions decoded one token at a time. Run it alone on the machine.
"""

from __future__ import annotations

import json
import os
import sys
import urllib.request
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import numpy as np  # noqa: E402

QUESTIONS = ["What is the capital of France?", "Why is the sky blue?", "Name three primary colors.",
             "Answer yes or no: is water wet?", "Say a word.", "Count to five."]  # fmt: skip


def main() -> int:
    import subprocess
    import tempfile

    from llama_cpp import Llama

    from llama_server import LLAMA_SERVER, LlamaServer, free_port, wait_ready
    from sleight.backends import load_model
    from sleight.backends.resolve import BUNDLED, DEFAULT_MODEL, bundled_gguf

    gguf = str(bundled_gguf(BUNDLED[DEFAULT_MODEL]))
    llm = Llama(model_path=gguf, n_ctx=2048, n_threads=2, logits_all=True, verbose=False)

    def logprobs(ids: list[int]) -> np.ndarray:
        llm.reset()
        llm.eval(ids)
        x = np.asarray(llm.scores[llm.n_tokens - 1], dtype=np.float64)
        return x - (np.log(np.exp(x - x.max()).sum()) + x.max())

    def serve(tmp: Path, *flags: str) -> LlamaServer:
        port = free_port()
        log = tmp / f"server-{port}.log"
        cmd = [str(LLAMA_SERVER), "-m", gguf, "--host", "127.0.0.1", "--port", str(port), "-a", "smol", "-t", "2", "-c", "4096", "--no-prefill-assistant", *flags]
        with open(log, "wb") as fh:
            proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT)
        return wait_ready(LlamaServer(proc, port, "smol", log), "llama-server", 60.0)

    def worst(sm, ctxs: list[list[int]]) -> float:
        refs = [logprobs(c) for c in ctxs]
        asked = [np.argsort(-r)[:5].tolist() for r in refs]
        got = sm.read_next(ctxs, asked, top_k=20)
        return max(max(np.abs(n.logprobs - r[a]).max(), np.abs(n.top_logprobs - r[n.top_ids]).max()) for n, r, a in zip(got, refs, asked))

    with tempfile.TemporaryDirectory() as tmp:
        for label, flags, in_flight in (("1 slot, -fa off", ("-np", "1", "-fa", "off"), 1),
                                         ("4 slots, 4 requests in flight, -fa off", ("-np", "4", "-fa", "off"), 4),
                                         ("1 slot, -fa auto", ("-np", "1", "-fa", "auto"), 1)):  # fmt: skip
            srv = serve(Path(tmp), *flags)
            try:
                sm = load_model(srv.spec, batch_size=in_flight)
                ctxs = [sm.render_chat([{"role": "user", "content": q}]).ids for q in QUESTIONS]
                print(f"{label}: max |server - in process| {worst(sm, ctxs):.2e}")
                if in_flight == 1 and "off" in flags:
                    cached = 0.0
                    for c in ctxs:
                        r = logprobs(c)
                        for _ in range(2):  # the second request finds its prompt cached
                            body = {"prompt": c, "n_predict": 1, "temperature": 0.0, "n_probs": 20, "return_tokens": True, "cache_prompt": True}
                            req = urllib.request.Request(srv.base_url.removesuffix("/v1") + "/completion", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
                            with urllib.request.urlopen(req) as resp:
                                top = json.load(resp)["completion_probabilities"][0]["top_logprobs"]
                        cached = max(cached, max(abs(e["logprob"] - r[e["id"]]) for e in top))
                    print(f"  a prompt read after its prefix was cached (cache_prompt): {cached:.2e}")
                    gens = sm.generate_scored(ctxs[:3], [24] * 3, forced=[None] * 3, top_k=20)
                    split = max(
                        float(np.abs(sm.score_tokens(c, [g.records.token_ids], top_k=20)[0].logprobs - g.records.logprobs).max())
                        for c, g in zip(ctxs, gens)
                    )
                    print(f"  a reply's positions read in one batch against the same decoded one token at a time: {split:.2e}")
                sm.close()
            finally:
                srv.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
