"""Finds and loads the C++ extension ``deepinfer._deepinfer``.

The project's CMake build writes it to ``<build>/python/deepinfer/`` (src/python/CMakeLists.txt);
nothing is installed. Looked for, in order: next to this file (a copy or an installed package),
``<entry>/deepinfer/`` for every ``sys.path`` entry (so ``PYTHONPATH=<build>/python`` selects
another build directory), then ``<checkout>/build/python/deepinfer/`` (the README's build).
See docs/python.md. (No DEEPINFER_* variable: the C++ side warns about unknown ones.)
"""

import importlib.machinery
import importlib.util
import sys
from pathlib import Path

_HERE = Path(__file__).resolve().parent
CHECKOUT = _HERE.parent.parent  # python/deepinfer/_native.py -> the repository root


def _candidates():
    dirs = [_HERE]
    for entry in sys.path:
        if entry:
            d = Path(entry) / "deepinfer"
            if d.resolve() != _HERE:
                dirs.append(d)
    dirs.append(CHECKOUT / "build" / "python" / "deepinfer")
    return dirs


def _load():
    looked = []
    for d in _candidates():
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            path = d / ("_deepinfer" + suffix)
            looked.append(str(path))
            if path.is_file():
                loader = importlib.machinery.ExtensionFileLoader("deepinfer._deepinfer", str(path))
                spec = importlib.util.spec_from_file_location(
                    "deepinfer._deepinfer", str(path), loader=loader)
                module = importlib.util.module_from_spec(spec)
                sys.modules["deepinfer._deepinfer"] = module
                loader.exec_module(module)
                return module
    raise ImportError(
        "deepinfer: the C++ extension _deepinfer is not built for this Python "
        f"({sys.version.split()[0]}); looked for {', '.join(looked[:3])} ... "
        "Run `make build` in the checkout (or `cmake --build build --target _deepinfer`), or put "
        "<your build dir>/python on PYTHONPATH.")


native = _load()
