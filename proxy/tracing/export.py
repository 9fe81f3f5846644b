"""The exporting process: `python -m proxy.tracing.export ENDPOINT`, started by `ship.Shipper`.

Its stdin carries frames (4-byte little-endian length, then a pickled list of span records, see
`otel.py`); `encode.Encoder` makes them OTLP protobuf, and the SDK's own `OTLPSpanExporter` client
sends it (`OTEL_EXPORTER_OTLP_*` headers, timeout, compression, retries with backoff). All of that
runs here, on another core and under another GIL, never on the proxy's.

A reader thread drains stdin into a bounded queue at once, so the proxy's writes never wait on a
slow or hanging collector: past `OTEL_BSP_MAX_QUEUE_SIZE` spans waiting, new ones are dropped and
counted. A failed export is reported on stdout as one JSON line at most once a minute (the proxy
logs it); the SDK's own per-batch log lines are kept quiet.
"""

from __future__ import annotations

import logging
import os
import pickle
import struct
import sys
import threading
import time
from collections import deque
from typing import BinaryIO

import orjson
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource

from .encode import Encoder

REPORT_EVERY_S = 60.0
NICENESS = 5  # a share of about a third of a normal process's when they compete
SCOPE = "memplane.proxy"
_HEADER = struct.Struct("<I")


def _int_env(name: str, default: int) -> int:
    try:
        return max(1, int(os.environ.get(name, "")))
    except ValueError:
        return default


class _LastError(logging.Handler):
    """Keeps the SDK exporter's last complaint (for the once-a-minute report) instead of printing it."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.last = ""

    def emit(self, record: logging.LogRecord) -> None:
        self.last = record.getMessage()[:500]


class Exporter:
    def __init__(self, endpoint: str, out: BinaryIO) -> None:
        self.queue: deque[tuple] = deque()
        self.limit = _int_env("OTEL_BSP_MAX_QUEUE_SIZE", 2048)
        self.batch = _int_env("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", 512)
        self.wake = threading.Event()
        self.closed = False
        self.dropped = self.failures = self.failed_spans = 0
        self.last_report = -REPORT_EVERY_S
        self.out = out
        self.errors = _LastError()
        sdk_log = logging.getLogger("opentelemetry")
        sdk_log.addHandler(self.errors)
        sdk_log.propagate = False
        resource = Resource.create({} if os.environ.get("OTEL_SERVICE_NAME") else {"service.name": "memplane"})
        self.encoder = Encoder(dict(resource.attributes), SCOPE)
        self.exporter = OTLPSpanExporter(endpoint=endpoint)

    def read(self, stream: BinaryIO) -> None:
        """The reader thread: frames off the pipe into the queue, as fast as they come."""
        try:
            while header := stream.read(_HEADER.size):
                frame = stream.read(_HEADER.unpack(header)[0])
                records = pickle.loads(frame)
                room = self.limit - len(self.queue)
                if room < len(records):
                    self.dropped += len(records) - max(room, 0)
                    records = records[:max(room, 0)]
                self.queue.extend(records)
                if len(self.queue) >= self.batch:
                    self.wake.set()
        finally:
            self.closed = True
            self.wake.set()

    def run(self, delay_s: float) -> None:
        while True:
            self.wake.wait(delay_s)
            self.wake.clear()
            while self.queue:
                records = [self.queue.popleft() for _ in range(min(self.batch, len(self.queue)))]
                if not self.send(self.encoder.encode(records)):
                    self.failures += 1
                    self.failed_spans += len(records)
                    if self.closed:  # the proxy stopped and the collector fails: one timeout, not one a batch
                        self.dropped += len(self.queue)
                        self.queue.clear()
            self.report()
            if self.closed and not self.queue:
                return

    def send(self, body: bytes) -> bool:
        """The SDK exporter's HTTP client: compression, headers, timeout and retries as OTEL_* say
        (its `export` would re-encode from `ReadableSpan`s; the bytes are already OTLP)."""
        try:
            client = getattr(self.exporter, "_client", None)
            if client is None:  # an SDK before 1.45: its one-request `_export`, without the retries
                return bool(self.exporter._export(body).ok)
            return bool(client.export(body).success)
        except Exception as exc:  # noqa: BLE001 - a failed export is reported, never fatal
            self.errors.last = f"{type(exc).__name__}: {exc}"[:500]
            return False

    def report(self) -> None:
        """At most once a minute: how many exports failed and spans were dropped since the last report."""
        if not (self.failures or self.dropped) or time.monotonic() - self.last_report < REPORT_EVERY_S:
            return
        self.last_report = time.monotonic()
        line = {"event": "tracing_export_failed" if self.failures else "tracing_spans_dropped", "endpoint": self.exporter._endpoint,
                "failed_exports": self.failures, "spans_lost": self.failed_spans + self.dropped,
                "error": self.errors.last or None, "next_report_in_s": REPORT_EVERY_S}
        self.failures = self.failed_spans = self.dropped = 0
        try:
            self.out.write(orjson.dumps(line) + b"\n")
            self.out.flush()
        except (OSError, ValueError):
            pass


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    exporter = Exporter(args[0], sys.stdout.buffer)
    try:  # started (imports done at full priority): on a busy host the turns come first, the queue waits
        os.nice(NICENESS)
    except OSError:
        pass
    threading.Thread(target=exporter.read, args=(sys.stdin.buffer,), daemon=True).start()
    delay_s = _int_env("OTEL_BSP_SCHEDULE_DELAY", 5000) / 1000
    try:
        exporter.run(delay_s)
    finally:
        exporter.exporter.shutdown()


if __name__ == "__main__":
    main()
