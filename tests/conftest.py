"""Test-session setup shared by every test module.

Triton reads TRITON_INTERPRET when it is first imported, so it is set here, before any test module
can import triton: kernel tests then run the Triton kernels on the CPU through the interpreter.
"""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")
