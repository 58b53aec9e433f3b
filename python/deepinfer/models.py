"""The checkpoint the examples run on: $DEEPINFER_HF_MODEL_DIR when set, else the `demo` preset.

The demo preset (DeepSeek-V4 layout, random weights, the real DeepSeek tokenizer) is the one
`make demo` serves: it lives in <checkout>/models/demo and is written there once by the built
`deepinfer make-test-model --arch deepseek_v4 --preset demo` when missing (about 150 MB), so
`make demo` and the examples share it.
"""

import os
import shutil
import subprocess
import sys
from pathlib import Path

from ._native import CHECKOUT, native


def _binary():
    # The `deepinfer` CLI of the build that made this extension.
    return str(Path(native.binary_dir) / "bin" / "deepinfer")


def demo_model(path=None):
    """Directory of the demo checkpoint, written first if missing."""
    d = Path(path) if path is not None else Path(native.source_dir or CHECKOUT) / "models" / "demo"
    if (d / "config.json").is_file() and (d / "tokenizer.json").is_file():
        return str(d)
    binary = _binary()
    if not Path(binary).is_file():
        raise FileNotFoundError(f"demo_model: {binary} not found; run `make build` first")
    print(f"deepinfer: writing the demo checkpoint (random weights) to {d} ...", file=sys.stderr)
    tmp = Path(str(d) + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.parent.mkdir(parents=True, exist_ok=True)
    r = subprocess.run([binary, "make-test-model", "--arch", "deepseek_v4", "--preset", "demo",
                        "--out", str(tmp)], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"demo_model: make-test-model failed ({r.returncode}): {r.stderr}")
    shutil.rmtree(d, ignore_errors=True)
    tmp.rename(d)
    return str(d)


def default_model():
    """$DEEPINFER_HF_MODEL_DIR when set, else demo_model()."""
    return os.environ.get("DEEPINFER_HF_MODEL_DIR") or demo_model()
