"""Prometheus metrics of the service, written in the text exposition format (version 0.0.4).

A few dozen lines of our own instead of the ``prometheus-client`` dependency: the service needs
only counters, gauges and histograms, and owning them keeps the registry per app (so tests that
start several apps in one process do not share counts).
"""

from __future__ import annotations

import bisect
import math
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Sequence

LabelValues = tuple[str, ...]

LATENCY_BUCKETS: tuple[float, ...] = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
)
BATCH_BUCKETS: tuple[float, ...] = (1, 2, 4, 8, 16, 32, 64, 128)
STEP_BUCKETS: tuple[float, ...] = (1, 2, 4, 8, 16, 32, 64, 128, 256)
TOKENS_PER_FORWARD_BUCKETS: tuple[float, ...] = (0.5, 1, 1.5, 2, 3, 4, 6, 8, 16, 32, 64)


def _escape(value: str) -> str:
    """Escape a label value as the exposition format requires (backslash, quote, newline)."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels(names: Sequence[str], values: Sequence[str], extra: str = "") -> str:
    parts = [f'{n}="{_escape(v)}"' for n, v in zip(names, values, strict=True)]
    if extra:
        parts.append(extra)
    return "{" + ",".join(parts) + "}" if parts else ""


def _number(x: float) -> str:
    if math.isinf(x):
        return "+Inf" if x > 0 else "-Inf"
    if float(x).is_integer():
        return str(int(x))
    return repr(float(x))


class _Metric(ABC):
    kind = ""

    def __init__(self, name: str, help_text: str, labelnames: Sequence[str] = ()) -> None:
        self.name = name
        self.help = help_text
        self.labelnames = tuple(labelnames)
        self._lock = threading.Lock()

    def _key(self, labels: dict[str, str] | None) -> LabelValues:
        labels = labels or {}
        if set(labels) != set(self.labelnames):
            raise ValueError(f"{self.name} takes labels {self.labelnames}, got {sorted(labels)}")
        return tuple(str(labels[n]) for n in self.labelnames)

    def header(self) -> list[str]:
        return [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} {self.kind}"]

    @abstractmethod
    def render(self) -> list[str]:
        """The metric's lines in the Prometheus text format."""


class Counter(_Metric):
    """A monotonically increasing count, optionally split by labels."""

    kind = "counter"

    def __init__(self, name: str, help_text: str, labelnames: Sequence[str] = ()) -> None:
        super().__init__(name, help_text, labelnames)
        self._values: dict[LabelValues, float] = {}

    def inc(self, amount: float = 1.0, **labels: str) -> None:
        key = self._key(labels)
        with self._lock:
            self._values[key] = self._values.get(key, 0.0) + amount

    def value(self, **labels: str) -> float:
        with self._lock:
            return self._values.get(self._key(labels), 0.0)

    def render(self) -> list[str]:
        with self._lock:
            items = sorted(self._values.items())
        return self.header() + [
            f"{self.name}{_labels(self.labelnames, k)} {_number(v)}" for k, v in items
        ]


class Gauge(_Metric):
    """A value read at scrape time from a callback (queue depth, model loaded)."""

    kind = "gauge"

    def __init__(self, name: str, help_text: str, read: Callable[[], float]) -> None:
        super().__init__(name, help_text)
        self._read = read

    def render(self) -> list[str]:
        return self.header() + [f"{self.name} {_number(float(self._read()))}"]


class Histogram(_Metric):
    """Cumulative-bucket histogram as Prometheus defines it (``_bucket``, ``_sum``, ``_count``)."""

    kind = "histogram"

    def __init__(
        self, name: str, help_text: str, buckets: Iterable[float], labelnames: Sequence[str] = ()
    ) -> None:
        super().__init__(name, help_text, labelnames)
        self.buckets = tuple(sorted(float(b) for b in buckets))
        # per label set: counts per bucket (non-cumulative, last = +Inf), sum
        self._data: dict[LabelValues, tuple[list[int], list[float]]] = {}

    def observe(self, value: float, **labels: str) -> None:
        key = self._key(labels)
        index = bisect.bisect_left(self.buckets, float(value))
        with self._lock:
            counts, total = self._data.setdefault(key, ([0] * (len(self.buckets) + 1), [0.0]))
            counts[index] += 1
            total[0] += float(value)

    def count(self, **labels: str) -> int:
        with self._lock:
            data = self._data.get(self._key(labels))
            return sum(data[0]) if data else 0

    def render(self) -> list[str]:
        lines = self.header()
        with self._lock:
            items = sorted((k, (list(c), s[0])) for k, (c, s) in self._data.items())
        for key, (counts, total) in items:
            running = 0
            for bound, n in zip((*self.buckets, math.inf), counts, strict=True):
                running += n
                le = f'le="{_number(bound)}"'
                lines.append(f"{self.name}_bucket{_labels(self.labelnames, key, le)} {running}")
            lines.append(f"{self.name}_sum{_labels(self.labelnames, key)} {_number(total)}")
            lines.append(f"{self.name}_count{_labels(self.labelnames, key)} {running}")
        return lines


class ServiceMetrics:
    """Every metric the service exports; one instance per app."""

    def __init__(
        self, queue_depth: Callable[[], float], model_loaded: Callable[[], float]
    ) -> None:
        self.requests = Counter(
            "decision_requests_total", "Decide requests by outcome.", ("outcome",)
        )
        self.latency = Histogram(
            "decision_request_latency_seconds",
            "Wall time of a decide request from arrival to answer, by outcome.",
            LATENCY_BUCKETS,
            ("outcome",),
        )
        self.queue_wait = Histogram(
            "decision_queue_wait_seconds",
            "Time a request waited in the queue before its batch started.",
            LATENCY_BUCKETS,
        )
        self.batch_seconds = Histogram(
            "decision_batch_seconds", "Wall time of one batched decide_many call.", LATENCY_BUCKETS
        )
        self.batch_size = Histogram(
            "decision_batch_size", "Requests decided together in one decide_many call.",
            BATCH_BUCKETS,
        )
        self.steps = Histogram(
            "decision_decode_steps", "Denoising steps a request took.", STEP_BUCKETS
        )
        self.tokens_per_forward = Histogram(
            "decision_tokens_per_forward",
            "Answer tokens fixed per model forward, per request.",
            TOKENS_PER_FORWARD_BUCKETS,
        )
        self.queue_depth = Gauge(
            "decision_queue_depth", "Requests waiting in the queue now.", queue_depth
        )
        self.model_loaded = Gauge(
            "decision_model_loaded", "1 when the model is loaded and the worker runs.",
            model_loaded,
        )
        self._all: list[_Metric] = [
            self.requests, self.latency, self.queue_wait, self.batch_seconds, self.batch_size,
            self.steps, self.tokens_per_forward, self.queue_depth, self.model_loaded,
        ]

    def render(self) -> str:
        """The whole registry in the Prometheus text format."""
        lines: list[str] = []
        for metric in self._all:
            lines.extend(metric.render())
        return "\n".join(lines) + "\n"
