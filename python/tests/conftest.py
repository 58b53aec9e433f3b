"""Fixtures of the deepinfer Python package's tests (run by ctest as python_test).

The build directory is the one that made the extension (ctest puts <build>/python on
PYTHONPATH); DEEPINFER_SHARED_DIR (set by ctest) locates ../shared. Models: stories260K from ../shared (real weights,
goldens) and the `demo` preset (DeepSeek-V4 layout, random weights, real tokenizer) generated
once into <build>/e2e-models/demo, the directory the e2e tests use.
"""

import os
import sys
from pathlib import Path

import pytest

CHECKOUT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(CHECKOUT / "python"))

import deepinfer  # noqa: E402

from deepinfer._native import native  # noqa: E402

BUILD = Path(native.binary_dir)
SHARED = Path(os.environ.get("DEEPINFER_SHARED_DIR", CHECKOUT.parent / "shared"))
STORIES = SHARED / "models" / "stories260K"
BIN = str(BUILD / "bin" / "deepinfer")


@pytest.fixture(scope="session")
def stories_dir():
    if not (STORIES / "config.json").is_file():
        pytest.skip(f"{STORIES} missing")
    return str(STORIES)


@pytest.fixture(scope="session")
def stories_llm(stories_dir):
    return deepinfer.LLM(model=stories_dir, kv_memory_bytes=64 << 20, max_num_seqs=64)


@pytest.fixture(scope="session")
def demo_dir():
    return deepinfer.demo_model(BUILD / "e2e-models" / "demo")


@pytest.fixture(scope="session")
def demo_llm(demo_dir):
    return deepinfer.LLM(model=demo_dir, kv_memory_bytes=256 << 20, max_num_seqs=8)
