"""Helpers for tests and benchmarks of the service: a tiny random checkpoint, a live server.

The tiny checkpoint is a random-weight ``DecisionModel`` with a byte-level tokenizer trained on
generated contract text (no downloads). Its answers are meaningless but deterministic, which is
what the service tests need: the same request gives the same answer alone or in a batch.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

TINY_VOCAB = 400


def tiny_checkpoint(directory: Path, *, seed: int = 0, max_positions: int = 4096) -> Path:
    """Write a tiny random model with its tokenizer to ``directory``; returns the directory."""
    import torch

    from decision.joint.toy import lease_sentences
    from decision.model import DecisionModel
    from decision.model.testing import randomize_block_params, tiny_config
    from decision.tokenizer import special_ids, train_tokenizer

    texts = lease_sentences(400, seed=seed) + ["yes no not stated true false 0123456789"]
    tokenizer = train_tokenizer(texts, vocab_size=TINY_VOCAB)
    ids = special_ids(tokenizer)
    config = tiny_config(
        vocab_size=tokenizer.get_vocab_size(with_added_tokens=True),
        mask_token_id=ids.mask, pad_token_id=ids.pad, eos_token_id=ids.eos,
        max_position_embeddings=max_positions,
    )
    torch.manual_seed(seed)
    model = DecisionModel(config, tokenizer=tokenizer).eval()
    randomize_block_params(model, torch.Generator().manual_seed(seed + 1))
    model.save(directory)
    return directory


def free_port() -> int:
    """A free TCP port on the loopback interface."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def running_server(app: Any, port: int | None = None, timeout: float = 60.0) -> Iterator[str]:
    """Run ``app`` with uvicorn in a thread on loopback; yields its base URL, stops on exit."""
    with started_server(app, port, timeout) as (url, _):
        yield url


@contextmanager
def started_server(
    app: Any, port: int | None = None, timeout: float = 60.0, **options: Any
) -> Iterator[tuple[str, Any]]:
    """:func:`running_server` yielding the uvicorn server too (for tests that stop it
    themselves), with ``options`` passed to ``uvicorn.Config`` (``timeout_graceful_shutdown``,
    ``log_level``)."""
    import uvicorn

    from decision.serve.app import ServiceServer

    port = port or free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port,
                            **{"log_level": "warning", "lifespan": "on", **options})
    server = ServiceServer(config)
    thread = threading.Thread(target=server.run, name="uvicorn-test", daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout
    while not server.started:
        if not thread.is_alive():
            raise RuntimeError("the server failed to start (see its log)")
        if time.monotonic() > deadline:
            server.should_exit = True
            raise RuntimeError(f"the server did not start within {timeout} s")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}", server
    finally:
        server.should_exit = True
        thread.join(timeout)
