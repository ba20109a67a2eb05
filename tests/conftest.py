"""Test-session setup shared by every test module.

Triton reads TRITON_INTERPRET when it is first imported, so it is set here, before any test module
can import triton: kernel tests then run the Triton kernels on the CPU through the interpreter.
"""

import importlib.util
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest


def _have_triton() -> bool:
    try:
        return importlib.util.find_spec("triton") is not None
    except (ImportError, ValueError):
        return False


# Triton is a Linux-only dependency (pyproject.toml). Where it is missing, the files that import
# it are not collected and the interpreter is off, so the tests that ask for the "triton" backend
# skip ("CPU run without the Triton interpreter") and the rest run on the PyTorch reference.
HAVE_TRITON = _have_triton()
collect_ignore = [] if HAVE_TRITON else [
    "test_kernels_triton_gdn.py", "test_kernels_triton_block.py", "test_kernels_compile.py",
]
if HAVE_TRITON:
    os.environ.setdefault("TRITON_INTERPRET", "1")
else:
    os.environ["TRITON_INTERPRET"] = "0"

# One torch thread per test process: the tiny test models are dominated by per-op overhead, and
# on the 2-core CI machine two threads contending with the test server's threads run up to 10x
# slower than one.
import torch  # noqa: E402

torch.set_num_threads(1)


@pytest.fixture(scope="session")
def tiny_checkpoint_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random-weight tiny model with its tokenizer, written once per session (read-only)."""
    from decision.serve.testing import tiny_checkpoint

    return tiny_checkpoint(tmp_path_factory.mktemp("shared") / "tiny-model")


CHROMIUM = "/usr/bin/chromium"
# headless on a closed network: without the background-networking flags Chromium keeps trying
# (and failing) to reach Google's hosts
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Debian's headless Chromium driven by Playwright (no browser download); skips without it."""
    if not os.path.exists(CHROMIUM):
        pytest.skip(f"{CHROMIUM} is missing (Debian package 'chromium'); .ci/run installs it")
    playwright_api = pytest.importorskip("playwright.sync_api",
                                         reason="playwright is not installed")
    with playwright_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield b
        b.close()


@pytest.fixture(scope="session")
def load_benchmark() -> Callable[[str], ModuleType]:
    """Import a script of benchmarks/ (not a package) by its file name, e.g. "gpu_kernels"."""
    root = Path(__file__).resolve().parents[1] / "benchmarks"

    def load(name: str) -> ModuleType:
        spec = importlib.util.spec_from_file_location(f"{name}_under_test", root / f"{name}.py")
        assert spec is not None and spec.loader is not None
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod

    return load
