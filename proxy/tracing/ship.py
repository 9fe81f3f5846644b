"""Finished spans from the event loop to the exporting process (`export.py`), off the turn's path.

The loop's whole share is `Shipper.put`: one `deque.append` of a tuple (and, once a frame's worth
is waiting, one `Event.set`). A daemon thread pickles what is waiting into a frame every
`OTEL_BSP_SCHEDULE_DELAY` ms (or as soon as a frame is full) and writes it to the exporter's
stdin; the exporter reads it at once into its own queue, so the write does not wait on the
collector. Nothing here blocks a turn: past `OTEL_BSP_MAX_QUEUE_SIZE` spans waiting, new ones are
dropped and counted, and an exporter that died is restarted at most once a minute.
"""

from __future__ import annotations

import os
import pickle
import struct
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Mapping
from typing import Any

import orjson

FRAME_SPANS = 256  # a frame: small enough that pickling it holds the GIL for well under a millisecond
RESTART_EVERY_S = 60.0
_HEADER = struct.Struct("<I")


def _int(env: Mapping[str, str], name: str, default: int) -> int:
    try:
        return max(1, int(env.get(name, "")))
    except ValueError:
        return default


class Shipper:
    def __init__(self, endpoint: str, env: Mapping[str, str], telemetry: Any = None) -> None:
        self.endpoint = endpoint
        self.telemetry = telemetry
        # the exporter's environment: this process's, with the OTEL_* settings memplane was given
        self.child_env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
        self.child_env.update({k: v for k, v in env.items() if k.startswith("OTEL_")})
        self.delay_s = _int(env, "OTEL_BSP_SCHEDULE_DELAY", 5000) / 1000
        self.limit = _int(env, "OTEL_BSP_MAX_QUEUE_SIZE", 2048)
        self.frame = min(FRAME_SPANS, _int(env, "OTEL_BSP_MAX_EXPORT_BATCH_SIZE", 512))
        self.queue: deque[tuple] = deque()
        self.wake = threading.Event()
        self.stopping = False
        self.dropped = 0
        self.child: subprocess.Popen | None = None
        self.last_start = self.last_drop_report = -RESTART_EVERY_S
        self.thread: threading.Thread | None = None
        self.lock = threading.Lock()  # start and stop only; never taken by `put`

    def put(self, record: tuple) -> None:
        """On the loop: hand one finished span over (or count it dropped when the queue is full)."""
        queue = self.queue
        if len(queue) >= self.limit:
            self.dropped += 1
            return
        queue.append(record)
        if self.thread is None:
            self._start_thread()
        elif len(queue) == self.frame:
            self.wake.set()

    def put_all(self, records: list[tuple]) -> None:
        """On the loop: a finished turn's spans at once."""
        queue = self.queue
        room = self.limit - len(queue)
        if room < len(records):
            self.dropped += len(records) - max(room, 0)
            records = records[:max(room, 0)]
        before = len(queue)
        queue.extend(records)
        if self.thread is None:
            self._start_thread()
        elif before < self.frame <= len(queue):
            self.wake.set()

    def _start_thread(self) -> None:
        with self.lock:
            if self.thread is None and not self.stopping:
                self.thread = threading.Thread(target=self._run, name="memplane-trace-shipper", daemon=True)
                self.thread.start()

    def _run(self) -> None:
        while True:
            self.wake.wait(self.delay_s)
            self.wake.clear()
            stopping = self.stopping
            self._drain()
            if self.dropped and time.monotonic() - self.last_drop_report >= RESTART_EVERY_S:
                self.last_drop_report = time.monotonic()
                lost, self.dropped = self.dropped, 0
                self._warn("tracing_spans_dropped", spans_lost=lost, queue_size=self.limit,
                           fix="raise OTEL_BSP_MAX_QUEUE_SIZE, or sample (OTEL_TRACES_SAMPLER)")
            if stopping:
                return

    def _drain(self) -> None:
        queue = self.queue
        while queue:
            records = [queue.popleft() for _ in range(min(self.frame, len(queue)))]
            frame = pickle.dumps(records, protocol=pickle.HIGHEST_PROTOCOL)
            child = self._child()
            if child is None:
                self.dropped += len(records)
                continue
            try:
                child.stdin.write(_HEADER.pack(len(frame)) + frame)
                child.stdin.flush()
            except (OSError, ValueError) as exc:  # the exporter died: say so, restart it within a minute
                self.dropped += len(records)
                self._warn("tracing_exporter_exited", error=str(exc) or type(exc).__name__,
                           returncode=child.poll())
                self.child = None

    def _child(self) -> subprocess.Popen | None:
        if self.child is not None:
            return self.child
        if time.monotonic() - self.last_start < RESTART_EVERY_S:
            return None
        self.last_start = time.monotonic()
        try:
            # its own session: a Ctrl-C meant for the proxy does not cut the spans still queued short;
            # it exits when its stdin closes (this process stopped, however it stopped)
            self.child = subprocess.Popen([sys.executable, "-m", "proxy.tracing.export", self.endpoint],
                                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=self.child_env,
                                          start_new_session=True)
        except OSError as exc:
            self._warn("tracing_exporter_unavailable", error=str(exc))
            return None
        threading.Thread(target=self._reports, args=(self.child,), name="memplane-trace-reports",
                         daemon=True).start()
        return self.child

    def _reports(self, child: subprocess.Popen) -> None:
        """The exporter's once-a-minute failure reports, logged as memplane's own warnings."""
        for line in child.stdout:
            try:
                fields = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue
            self._warn(fields.pop("event", "tracing_export_failed"), **fields)

    def _warn(self, event: str, **fields: Any) -> None:
        if self.telemetry is not None:
            self.telemetry.warning(event, **fields)
        else:
            sys.stderr.write(orjson.dumps({"event": event, **fields}).decode() + "\n")

    def shutdown(self, timeout_s: float = 5.0) -> None:
        """Send what is waiting and close the exporter's stdin (blocking: a thread's job). The exporter
        sends the rest and exits by itself; a hanging collector holds it, not this process, for at
        most its own export timeout (OTEL_EXPORTER_OTLP_TIMEOUT). An exporter that stopped reading is
        ended instead (within `timeout_s`)."""
        with self.lock:
            self.stopping = True
            thread = self.thread
        if thread is not None:
            self.wake.set()
            thread.join(timeout_s)
        else:
            self._drain()
        child = self.child
        if child is None:
            return
        if thread is not None and thread.is_alive():
            # the exporter reads nothing (stopped, frozen): the pipe is full and the thread's write waits,
            # holding the pipe's lock, so closing it would wait too. Ended, it breaks the write.
            self._warn("tracing_exporter_stuck", spans_lost=len(self.queue), returncode=child.poll())
            child.kill()
            return
        try:
            child.stdin.close()
        except OSError:
            pass
        try:
            child.wait(timeout_s)
        except subprocess.TimeoutExpired:
            pass
