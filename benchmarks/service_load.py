"""Load test of the HTTP service: requests per second and latency percentiles.

Starts ``decision serve`` itself (a subprocess on loopback, one per batching setting), sends a
bounded number of ``POST /decide`` requests at concurrency 1, 8 and 32, with batching on and off,
and prints a Markdown table (``--append-docs`` appends it to docs/benchmarks.md under
"## Service load").

    .venv/bin/python benchmarks/service_load.py                 # tiny random model
    .venv/bin/python benchmarks/service_load.py --model models/default --requests 96

Without ``--model`` it builds a tiny random checkpoint in a temporary folder: the numbers then
measure the service (HTTP, queue, batching, decoder loop) around a model whose forwards are
nearly free, not a trained model's speed.

Memory soak (``--memory-every K``): one server (batching on), ``--requests`` requests at the
first ``--concurrency`` after ``--warmup`` warm-up requests, and the server process's resident
memory (``VmRSS`` of ``/proc/PID/status``) read after the warm-up and then every K requests, to
see whether it levels off. Each request asks 5 questions (boolean, integer range, choice,
pattern, JSON); with ``--distinct-schemas`` every request's integer range, choice options, regex,
JSON schema and document are new (the schema caches are driven past their bounds), without it
every request asks the same schemas over 4 documents (``--append-docs`` appends the result under
"## Service memory"):

    .venv/bin/python benchmarks/service_load.py --model models/default --memory-every 250 \
        --requests 3000 --warmup 300 --concurrency 4 --distinct-schemas
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import platform
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from decision.serve.testing import free_port, tiny_checkpoint  # noqa: E402

DOCUMENTS = [
    "The tenant shall give 30 days of written notice. The tenant gave notice 20 days before "
    "the end of the term. The landlord may retain the deposit if notice was late.",
    "Rent of 900 euros is due on day 1 of each month, with a grace period of 5 days. A late fee "
    "of 40 euros applies after the grace period. Rent for March was paid on day 9.",
    "The agreement renews automatically for 12 months unless either party objects in writing "
    "at least 60 days before the end of the term. No objection was received.",
    "Either party may terminate after two late payments. There were 3 earlier late payments. "
    "The deposit of 1200 euros is held in escrow by the landlord.",
]
QUESTIONS = [
    {"id": "timely", "text": "Was notice given on time?", "answer": {"type": "boolean"}},
    {"id": "days", "text": "How many days of notice are required?",
     "answer": {"type": "integer", "minimum": 0, "maximum": 365}},
    {"id": "deposit", "text": "May the deposit be retained?",
     "answer": {"type": "choice", "options": ["yes", "no", "not stated"]}},
]


def body(i: int) -> dict[str, Any]:
    return {"document": DOCUMENTS[i % len(DOCUMENTS)], "questions": QUESTIONS, "mode": "joint"}


def soak_body(i: int, distinct: bool) -> dict[str, Any]:
    """Request ``i`` of the memory soak: 5 questions; with ``distinct`` its integer range,
    choice options, regex, JSON schema and document are those of no other request (``i``
    spelled into each), else those of request 0 (over the 4 documents)."""
    n = i if distinct else 0
    document = DOCUMENTS[i % len(DOCUMENTS)]
    if distinct:
        document += f" The file reference is R-{i:06d}; the unit is number {i % 997}."
    key = f"unit_{n}"
    return {"document": document, "mode": "joint", "questions": [
        {"id": "timely", "text": "Was notice given on time?", "answer": {"type": "boolean"}},
        {"id": "days", "text": "How many days of notice are required?",
         "answer": {"type": "integer", "minimum": n % 7, "maximum": 365 + n}},
        {"id": "deposit", "text": "May the deposit be retained?",
         "answer": {"type": "choice", "options": [f"yes {n}", f"no {n}", "not stated"]}},
        {"id": "reference", "text": "What is the file reference?",
         "answer": {"type": "pattern", "regex": f"R-{n:06d}|[A-Z]-[0-9]{{1,{1 + n % 5}}}",
                    "max_tokens": 12}},
        {"id": "record", "text": "The unit and whether a payment was late, as JSON.",
         "answer": {"type": "json", "max_tokens": 40, "schema": {
             "type": "object", "additionalProperties": False, "required": [key, "late"],
             "properties": {key: {"type": "integer"}, "late": {"type": "boolean"}}}}},
    ]}


def rss_kib(pid: int) -> int:
    """Resident memory of process ``pid`` in KiB (``VmRSS`` of ``/proc/PID/status``)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS in /proc/{pid}/status")


@dataclass
class Soak:
    concurrency: int
    warmup: int
    seconds: float
    samples: list[tuple[int, int]]  # (requests answered after the warm-up, RSS KiB)
    errors: int

    @property
    def per_1k_kib(self) -> float:
        """RSS growth per 1,000 requests: least-squares slope over the samples."""
        if len(self.samples) < 2:
            return float("nan")
        xs = [x for x, _ in self.samples]
        ys = [y for _, y in self.samples]
        mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
        var = sum((x - mx) ** 2 for x in xs)
        return 1000 * sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / var

    @property
    def second_half_per_1k_kib(self) -> float:
        """The same slope over the second half of the requests only (after caches filled)."""
        half = self.samples[-1][0] / 2
        later = [s for s in self.samples if s[0] >= half]
        return Soak(self.concurrency, self.warmup, self.seconds, later, 0).per_1k_kib


async def run_soak(url: str, pid: int, concurrency: int, requests: int, warmup: int,
                   every: int, distinct: bool) -> Soak:
    errors = 0
    async with httpx.AsyncClient(timeout=600) as client:

        async def send(i: int) -> None:
            nonlocal errors
            response = await client.post(f"{url}/decide", json=soak_body(i, distinct))
            errors += response.status_code != 200

        async def drain(indices: Any, on_done: Any = None) -> None:
            for i in indices:
                await send(i)
                if on_done is not None:
                    on_done()

        warm = iter(range(warmup))
        await asyncio.gather(*(drain(warm) for _ in range(concurrency)))
        samples = [(0, rss_kib(pid))]
        print(f"after {warmup} warm-up requests: RSS {samples[0][1] / 1024:.1f} MiB",
              file=sys.stderr, flush=True)
        done = 0

        def sample() -> None:
            nonlocal done
            done += 1
            if done % every == 0 or done == requests:
                samples.append((done, rss_kib(pid)))
                print(f"{done:>7} requests: RSS {samples[-1][1] / 1024:.1f} MiB "
                      f"({time.perf_counter() - start:.0f} s)", file=sys.stderr, flush=True)

        counter = iter(range(warmup, warmup + requests))
        start = time.perf_counter()
        await asyncio.gather(*(drain(counter, sample) for _ in range(concurrency)))
        seconds = time.perf_counter() - start
    return Soak(concurrency, warmup, seconds, samples, errors)


def soak_table(soak: Soak) -> str:
    lines = ["| requests after warm-up | RSS MiB | change MiB |", "|---:|---:|---:|"]
    first = soak.samples[0][1]
    for n, kib in soak.samples:
        lines.append(f"| {n} | {kib / 1024:.1f} | {(kib - first) / 1024:+.1f} |")
    return "\n".join(lines)


@dataclass
class Cell:
    batching: bool
    concurrency: int
    requests: int
    seconds: float
    latencies_ms: list[float]
    errors: int
    mean_batch: float

    @property
    def rps(self) -> float:
        return self.requests / self.seconds

    def pct(self, q: float) -> float:
        data = sorted(self.latencies_ms)
        if not data:
            return float("nan")
        # nearest-rank percentile
        k = max(0, min(len(data) - 1, math.ceil(q / 100 * len(data)) - 1))
        return data[k]


def _batch_stats(metrics: str) -> tuple[float, float]:
    count = total = 0.0
    for line in metrics.splitlines():
        if line.startswith("decision_batch_size_count"):
            count = float(line.split()[-1])
        elif line.startswith("decision_batch_size_sum"):
            total = float(line.split()[-1])
    return count, total


async def run_cell(url: str, concurrency: int, requests: int, batching: bool) -> Cell:
    latencies: list[float] = []
    errors = 0
    counter = iter(range(requests))
    async with httpx.AsyncClient(timeout=600) as client:
        before = _batch_stats((await client.get(f"{url}/metrics")).text)

        async def worker() -> None:
            nonlocal errors
            for i in counter:
                start = time.perf_counter()
                response = await client.post(f"{url}/decide", json=body(i))
                latencies.append((time.perf_counter() - start) * 1000.0)
                errors += response.status_code != 200

        start = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        seconds = time.perf_counter() - start
        after = _batch_stats((await client.get(f"{url}/metrics")).text)
    batches = after[0] - before[0]
    mean_batch = (after[1] - before[1]) / batches if batches else float("nan")
    return Cell(batching, concurrency, requests, seconds, latencies, errors, mean_batch)


def start_server(model: Path, port: int, batching: bool, threads: int) -> subprocess.Popen[bytes]:
    command = [
        sys.executable, "-m", "decision.cli", "serve", "--model", str(model),
        "--host", "127.0.0.1", "--port", str(port), "--max-batch-size",
        "32" if batching else "1", "--max-wait-ms", "5", "--queue-size", "512",
        "--timeout", "600", "--no-apps", "--log-level", "warning",
    ]
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS=str(threads))
    process = subprocess.Popen(command, env=env, cwd=ROOT)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the server exited with {process.returncode}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                return process
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    process.kill()
    raise RuntimeError("the server did not start within 300 s")


def table(cells: list[Cell]) -> str:
    lines = [
        "| batching | concurrency | requests | req/s | p50 ms | p95 ms | p99 ms | mean batch | "
        "errors |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for c in cells:
        lines.append(
            f"| {'on' if c.batching else 'off'} | {c.concurrency} | {c.requests} | {c.rps:.2f} | "
            f"{c.pct(50):.0f} | {c.pct(95):.0f} | {c.pct(99):.0f} | {c.mean_batch:.1f} | "
            f"{c.errors} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=None,
                        help="checkpoint directory (default: a tiny random model)")
    parser.add_argument("--requests", type=int, default=64, help="requests per cell")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--threads", type=int, default=1, help="torch threads of the server")
    parser.add_argument("--append-docs", action="store_true",
                        help="append the result to docs/benchmarks.md")
    parser.add_argument("--memory-every", type=int, default=0, metavar="K",
                        help="memory soak instead: read the server's RSS after the warm-up and "
                        "every K requests (one server, batching on, the first --concurrency)")
    parser.add_argument("--warmup", type=int, default=None,
                        help="warm-up requests (default: 4 per server; 200 for the soak)")
    parser.add_argument("--distinct-schemas", action="store_true",
                        help="soak: every request's schemas and document are new")
    args = parser.parse_args(argv)
    if args.requests < 1 or min(args.concurrency) < 1:
        parser.error("--requests and --concurrency must be positive")
    if args.memory_every < 0 or (args.warmup is not None and args.warmup < 0):
        parser.error("--memory-every and --warmup must not be negative")
    if args.distinct_schemas and not args.memory_every:
        parser.error("--distinct-schemas is an option of the memory soak (--memory-every)")
    if args.memory_every:
        return soak_main(args, argv)

    with tempfile.TemporaryDirectory() as tmp:
        model = args.model or tiny_checkpoint(Path(tmp) / "tiny-random")
        cells: list[Cell] = []
        for batching in (True, False):
            port = free_port()
            server = start_server(model, port, batching, args.threads)
            try:
                url = f"http://127.0.0.1:{port}"
                warmup = min(4, args.requests) if args.warmup is None else args.warmup
                if warmup:
                    asyncio.run(run_cell(url, 1, warmup, batching))
                for concurrency in args.concurrency:
                    cell = asyncio.run(run_cell(url, concurrency, args.requests, batching))
                    cells.append(cell)
                    print(f"batching {'on ' if batching else 'off'} c={concurrency:>2}: "
                          f"{cell.rps:.2f} req/s, p50 {cell.pct(50):.0f} ms, "
                          f"p99 {cell.pct(99):.0f} ms, mean batch {cell.mean_batch:.1f}",
                          file=sys.stderr)
            finally:
                server.terminate()
                server.wait(30)
        model_name = "tiny random model (76k parameters)" if args.model is None else str(
            args.model)

    command = "python benchmarks/service_load.py " + " ".join(argv or sys.argv[1:])
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    report = "\n".join([
        "## Service load",
        "",
        f"`{command.strip()}` on {datetime.now(UTC):%Y-%m-%d %H:%M} UTC; {platform.machine()}, "
        f"{os.cpu_count()} CPU cores (1-minute load average {load:.1f} at the end: the cores "
        f"were shared), torch threads {args.threads}, model: {model_name}. Server and client "
        "on loopback; joint mode, 3 questions (boolean, integer 0..365, 3-way choice) per "
        "request; batching on = up to 32 requests per batch, 5 ms collection wait; off = one "
        "request per forward batch.",
        "",
        table(cells),
        "",
        f"Latency percentiles are nearest-rank over the {args.requests} requests of a cell "
        f"(after {warmup} warm-up requests); mean batch is requests per "
        "`decide_many` call, from the server's `/metrics`.",
        "",
    ])
    print(report)
    if args.append_docs:
        with (ROOT / "docs" / "benchmarks.md").open("a", encoding="utf-8") as handle:
            handle.write("\n" + report)
    return 0


def soak_main(args: argparse.Namespace, argv: list[str] | None) -> int:
    warmup = 200 if args.warmup is None else args.warmup
    concurrency = args.concurrency[0]
    with tempfile.TemporaryDirectory() as tmp:
        model = args.model or tiny_checkpoint(Path(tmp) / "tiny-random")
        port = free_port()
        server = start_server(model, port, True, args.threads)
        try:
            soak = asyncio.run(run_soak(f"http://127.0.0.1:{port}", server.pid, concurrency,
                                        args.requests, warmup, args.memory_every,
                                        args.distinct_schemas))
            peak = next(int(line.split()[1]) for line in
                        Path(f"/proc/{server.pid}/status").read_text().splitlines()
                        if line.startswith("VmHWM:"))
        finally:
            server.terminate()
            server.wait(30)
    model_name = "tiny random model (76k parameters)" if args.model is None else str(args.model)
    first, last = soak.samples[0][1], soak.samples[-1][1]
    print(f"RSS {first / 1024:.1f} MiB after {warmup} warm-up requests, {last / 1024:.1f} MiB "
          f"after {args.requests} more ({soak.per_1k_kib / 1024:+.2f} MiB per 1k requests; "
          f"{soak.second_half_per_1k_kib / 1024:+.2f} over the second half), peak "
          f"{peak / 1024:.1f} MiB, {args.requests / soak.seconds:.1f} req/s, "
          f"{soak.errors} errors", file=sys.stderr)
    command = "python benchmarks/service_load.py " + " ".join(argv or sys.argv[1:])
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    schemas = ("every request's integer range, choice options, regex, JSON schema and document "
               "new" if args.distinct_schemas else "the same schemas in every request, over 4 "
               "documents")
    report = "\n".join([
        "## Service memory",
        "",
        f"`{command.strip()}` on {datetime.now(UTC):%Y-%m-%d %H:%M} UTC; {platform.machine()}, "
        f"{os.cpu_count()} CPU cores (1-minute load average {load:.1f} at the end), torch "
        f"threads {args.threads}, model: {model_name}. One server, batching on (up to 32), "
        f"concurrency {concurrency}; joint mode, 5 questions (boolean, integer range, 3-way "
        f"choice, pattern, JSON object) per request, {schemas}. RSS is the server process's "
        f"`VmRSS`, read after {warmup} warm-up requests and every {args.memory_every} after.",
        "",
        soak_table(soak),
        "",
        f"{args.requests} requests in {soak.seconds:.0f} s ({args.requests / soak.seconds:.1f} "
        f"req/s), {soak.errors} errors; growth {soak.per_1k_kib / 1024:+.2f} MiB per 1,000 "
        f"requests (least-squares slope over the samples; "
        f"{soak.second_half_per_1k_kib / 1024:+.2f} over the second half); peak RSS (`VmHWM`) "
        f"{peak / 1024:.1f} MiB.",
        "",
    ])
    print(report)
    if args.append_docs:
        with (ROOT / "docs" / "benchmarks.md").open("a", encoding="utf-8") as handle:
            handle.write("\n" + report)
    return 0 if soak.errors == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
