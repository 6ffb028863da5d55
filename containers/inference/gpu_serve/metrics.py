"""Structured JSON log lines, in-process counters, and the CloudWatch Logs metric filters that read them.

Every line the server writes to stdout is one JSON object with an ``event`` field:

- ``access``: one per HTTP request: ``method``, ``path``, ``status``, ``latency_ms``, and for invocations
  ``model_latency_ms``, ``queue_ms``, ``batch_size``, ``bytes_in``, ``bytes_out``, ``request_id``; a request
  whose response was not fully written has ``cut_off`` (``client``: status 499; ``shutdown``: status 503),
  ``sent_status`` (the status of the response that was cut off, if one was started) and ``error``;
- ``batch``: one per forward pass: ``batch_size`` (rows), ``requests``, ``model_latency_ms``, ``queued``;
- ``metrics``: a periodic summary of the counters (totals since start);
- ``start``, ``ready``, ``draining``, ``stop``, ``error``, ``warning``: lifecycle and failures
  (``error`` lines carry the ``traceback``).

SageMaker sends the container's stdout to CloudWatch Logs (one event per line), so each metric in
:data:`LOG_METRIC_FILTERS` is a metric filter on the endpoint's log group: CDK code turns them into
``logs.MetricFilter(..., filter_pattern=logs.FilterPattern.literal(f.filter_pattern),
metric_value=f.metric_value)`` and alarms on the resulting metrics.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Protocol, TextIO

#: Default CloudWatch namespace for the metrics below.
METRIC_NAMESPACE = "GpuServe"


@dataclass(frozen=True)
class LogMetricFilter:
    """One CloudWatch Logs metric filter over the server's JSON log lines."""

    metric_name: str
    filter_pattern: str
    metric_value: str
    unit: str
    description: str
    default_value: float | None = None


_INVOKE = '($.event = "access") && ($.path = "/invocations")'

#: The metric filters a stack creates on the endpoint's log group (pattern syntax: CloudWatch Logs JSON
#: filter patterns; a value taken from a field is also matched in the pattern, as CloudWatch requires).
LOG_METRIC_FILTERS: tuple[LogMetricFilter, ...] = (
    LogMetricFilter(
        "Invocations", f"{{ {_INVOKE} }}", "1", "Count", "Every /invocations request, whatever its status."
    ),
    LogMetricFilter(
        "Invocation4XXErrors",
        f"{{ {_INVOKE} && ($.status >= 400) && ($.status < 500) }}",
        "1",
        "Count",
        "Client errors: 400 bad input, 406, 413, 415; 499 when the client hung up before its answer was written.",
        0,
    ),
    LogMetricFilter(
        "Invocation5XXErrors",
        f"{{ {_INVOKE} && ($.status >= 500) }}",
        "1",
        "Count",
        "Server errors: 500 handler failure, 503 overload or draining, 504 timeout.",
        0,
    ),
    LogMetricFilter(
        "InvocationHandlerErrors",
        f"{{ {_INVOKE} && ($.status = 500) }}",
        "1",
        "Count",
        "500: an exception in predict_fn/output_fn (the traceback is in the matching error line).",
        0,
    ),
    LogMetricFilter(
        "InvocationsThrottled",
        f"{{ {_INVOKE} && ($.status = 503) }}",
        "1",
        "Count",
        "503: the request queue was full, too many connections, the server was loading or draining, or the "
        "shutdown cut a response off.",
        0,
    ),
    LogMetricFilter(
        "InvocationTimeouts",
        f"{{ {_INVOKE} && ($.status = 504) }}",
        "1",
        "Count",
        "504: no answer within GPU_SERVE_REQUEST_TIMEOUT_S.",
        0,
    ),
    LogMetricFilter(
        "PayloadTooLarge",
        f"{{ {_INVOKE} && ($.status = 413) }}",
        "1",
        "Count",
        "413: body over GPU_SERVE_MAX_BODY_BYTES.",
        0,
    ),
    LogMetricFilter(
        "RequestLatency",
        f'{{ {_INVOKE} && ($.status = 200) && ($.latency_ms = "*") }}',
        "$.latency_ms",
        "Milliseconds",
        "Server-side latency of a successful invocation: read, decode, queue, forward, encode.",
    ),
    LogMetricFilter(
        "ModelLatency",
        f'{{ {_INVOKE} && ($.status = 200) && ($.model_latency_ms = "*") }}',
        "$.model_latency_ms",
        "Milliseconds",
        "Forward pass (predict_fn) time of the batch that carried the request.",
    ),
    LogMetricFilter(
        "QueueLatency",
        f'{{ {_INVOKE} && ($.status = 200) && ($.queue_ms = "*") }}',
        "$.queue_ms",
        "Milliseconds",
        "Time a decoded request waited for its batch to start.",
    ),
    LogMetricFilter(
        "BatchSize",
        '{ ($.event = "batch") && ($.batch_size = "*") }',
        "$.batch_size",
        "Count",
        "Rows per forward pass (use the Average statistic for the mean batch size).",
    ),
)


def _now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class LogSink(Protocol):
    """Anything with :meth:`JsonLogger.log`'s signature (a model process forwards records to its server)."""

    def log(self, event: str, **fields: Any) -> None: ...


class JsonLogger:
    """Writes one JSON object per line to a stream, thread-safe, flushed per line.

    :meth:`defer` queues a record (its timestamp taken at once) to be written by :meth:`flush_deferred`, so
    that a busy event loop writes the access lines of many requests with one write after answering them all;
    any later :meth:`log` writes the queued records first, so lines keep their order.
    """

    def __init__(self, stream: TextIO | None = None) -> None:
        self._stream = stream
        self._lock = threading.Lock()
        self._deferred: list[dict[str, Any]] = []

    def log(self, event: str, **fields: Any) -> None:
        record = {"ts": _now_iso(), "event": event, **fields}
        self._write([record])

    def defer(self, event: str, **fields: Any) -> bool:
        """Queue a record; True when it is the first queued since the last flush (the caller schedules one)."""
        with self._lock:
            self._deferred.append({"ts": _now_iso(), "event": event, **fields})
            return len(self._deferred) == 1

    def flush_deferred(self) -> None:
        self._write([])

    def _write(self, records: list[dict[str, Any]]) -> None:
        stream = self._stream if self._stream is not None else sys.stdout
        with self._lock:
            if self._deferred:
                records = [*self._deferred, *records]
                self._deferred = []
            if not records:
                return
            text = "".join(json.dumps(r, default=str, separators=(",", ":")) + "\n" for r in records)
            try:
                stream.write(text)
                stream.flush()
            except (OSError, ValueError):  # closed pipe at shutdown: logging must never fail a request
                pass


@dataclass
class Counters:
    """Totals since start, summarised in the periodic ``metrics`` line."""

    requests: int = 0
    invocations: int = 0
    responses_by_status: Counter[int] = field(default_factory=Counter)
    batches: int = 0
    batched_rows: int = 0
    batch_size_histogram: Counter[int] = field(default_factory=Counter)
    started: float = field(default_factory=time.monotonic)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def record_response(self, path: str, status: int) -> None:
        with self._lock:
            self.requests += 1
            if path == "/invocations":
                self.invocations += 1
                self.responses_by_status[status] += 1

    def record_batch(self, rows: int) -> None:
        with self._lock:
            self.batches += 1
            self.batched_rows += rows
            self.batch_size_histogram[rows] += 1

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            errors = {str(s): n for s, n in sorted(self.responses_by_status.items()) if s >= 400}
            return {
                "uptime_s": round(time.monotonic() - self.started, 3),
                "requests_total": self.requests,
                "invocations_total": self.invocations,
                "invocations_ok": self.responses_by_status.get(200, 0),
                "errors_by_status": errors,
                "batches_total": self.batches,
                "batched_rows_total": self.batched_rows,
                "mean_batch_size": round(self.batched_rows / self.batches, 3) if self.batches else 0.0,
                "batch_size_histogram": {str(k): v for k, v in sorted(self.batch_size_histogram.items())},
            }
