"""Which vLLM releases know the study's quantization methods: each release's wheel fetched from the
package index (no dependencies, nothing installed), its registry read as the plan reads an install.

    python benchmarks/vllm_releases.py                          # the releases the docs table lists
    python benchmarks/vllm_releases.py --versions 0.27.1,0.28.0

Needs the package index (~330 MB a wheel, deleted after reading). Prints, per release, whether
``bitsandbytes`` and ``gguf`` are vLLM quantization methods, and whether every other quantization,
load format and engine argument of the shipped study file is known (docs/engines.md).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from sleight.backends.vllm_registry import REGISTRY_FILES, VllmRegistry, read_registry, refusal
from sleight.tamper.sweep import config as sweep_config

VERSIONS = "0.23.0,0.24.0,0.25.0,0.26.0,0.27.0,0.27.1,0.28.0,0.29.0,0.30.0,0.31.0,0.32.0,0.33.0"


def release_registry(version: str, work: Path) -> VllmRegistry:
    """The registry of vLLM ``version``'s wheel (its three files only)."""
    dest = work / version
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "-q", "--no-deps", f"vllm=={version}", "-d", str(dest)], check=True, capture_output=True
    )
    wheel = next(dest.glob("*.whl"))
    with zipfile.ZipFile(wheel) as zf:
        for rel in REGISTRY_FILES.values():
            target = dest / "vllm" / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(zf.read(f"vllm/{rel}"))
    wheel.unlink()
    return read_registry(dest / "vllm", version, "vllm")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--versions", default=VERSIONS, help="comma-separated vLLM releases")
    args = ap.parse_args(argv)
    study = sweep_config.load_config("study")
    specs = [(m.name, m.spec) for m in study.subjects] + [(f"judge {j.name}", j.spec) for j in (study.jury.judges if study.jury else ())]
    print(f"{'vLLM':8}  bitsandbytes  gguf  study models it cannot load by name")
    with tempfile.TemporaryDirectory() as tmp:
        for v in args.versions.split(","):
            try:
                reg = release_registry(v.strip(), Path(tmp))
            except (subprocess.CalledProcessError, StopIteration, KeyError, LookupError) as exc:
                print(f"{v:8}  (not read: {type(exc).__name__})")
                continue
            bad = [n for n, s in specs if s.engine == "vllm" and refusal(n, s, reg)]
            has = {q: "yes" if q in reg.quantizations else "no" for q in ("bitsandbytes", "gguf")}
            print(f"{v:8}  {has['bitsandbytes']:12}  {has['gguf']:4}  {len(bad)} of {len(specs)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
