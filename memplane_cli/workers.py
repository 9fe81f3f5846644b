"""Several processes serving one address (`--workers N`): every core runs Python, not only one.

Why processes and SO_REUSEPORT: one event loop holds one core however many the machine has. Each
worker is forked before any event loop or thread exists, builds its own app and binds the same
port with SO_REUSEPORT, so the kernel spreads new connections over the workers by hash — no
accept thundering herd, and no single process grabbing every connection of a burst (asyncio
accepts up to its backlog per wake-up). The parent only supervises: it waits until every worker
listens, forwards SIGTERM/SIGINT, and starts again a worker that died (a crash loop stops all).

What may run as several workers is the caller's decision (docs/DESIGN.md, "Workers"): proxies
that share the Redis ledger, tiered replicas (kept coherent through Redis), embedded engines over
one SQLite store (kept in step through its change log, docs/scaling.md); never two writers of one
file ledger.
"""

from __future__ import annotations

import ctypes
import os
import select
import signal
import socket
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field

from aiohttp import web

from . import runner

FAST_EXIT_S = 3.0  # a worker that dies sooner after it started counts towards a crash loop
CRASH_LOOP = 3  # fast deaths in a row that stop everything (a port in use, a bad setting)
WORKER_ENV = "MEMPLANE_WORKER"  # set in each worker: its number, 0..N-1 (logs, /healthz)


@dataclass
class Listener:
    """One address served by the workers it is given to; the app is built inside each worker."""

    build: Callable[[], web.Application]
    host: str
    port: int
    name: str = ""
    _reserved: socket.socket | None = field(default=None, repr=False)


def auto_workers(cpus: int | None = None) -> int:
    """One worker per core the process may use, at most 8 (a proxy worker holds ~one core at load)."""
    if cpus is None:
        try:
            cpus = len(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            cpus = os.cpu_count() or 1
    return max(1, min(8, cpus))


def worker_number() -> int:
    """In a worker: its number (0..N-1); 0 outside workers."""
    try:
        return int(os.environ.get(WORKER_ENV, "0"))
    except ValueError:
        return 0


def first_worker() -> bool:
    """In a worker: whether it is worker 0 (the one that does a service's once-only background work)."""
    return worker_number() == 0


def _reserve(listener: Listener) -> None:
    """Hold the address for the workers: a bound (not listening) SO_REUSEPORT socket, so that they
    all bind the same port (port 0: chosen here once) and nobody else takes it meanwhile. First a
    plain bind: a port another program (or another memplane) already serves is refused, not shared."""
    if listener._reserved is not None:
        return
    family = socket.AF_INET6 if ":" in listener.host else socket.AF_INET
    if listener.port:
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind((listener.host, listener.port))  # OSError (address in use) to the caller
    s = socket.socket(family, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    s.bind((listener.host, listener.port))
    listener._reserved, listener.port = s, s.getsockname()[1]


def _die_with_parent() -> None:
    """Linux: a worker gets SIGTERM when the parent dies, even by SIGKILL (no orphans holding the port)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _worker(number: int, listeners: list[Listener], grace_s: float, ready_fd: int) -> None:
    """Inside the forked worker: build the apps, listen, say so on the pipe, serve until a signal."""
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, signal.SIG_DFL)
    _die_with_parent()
    os.environ[WORKER_ENV] = str(number)
    code = 0
    try:
        sites = [runner.Site(l.build(), l.host, l.port, l.name, reuse_port=True) for l in listeners]

        def ready(_ports: list[int]) -> None:
            os.write(ready_fd, f"{number}\n".encode())

        runner.run(runner.serve(sites, grace_s=grace_s, on_ready=ready))
    except BaseException:  # noqa: BLE001  (the reason goes to stderr; the parent sees the exit code)
        traceback.print_exc()
        code = 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def serve_processes(processes: list[list[Listener]], *, grace_s: float = 30.0,
                    on_ready: Callable[[], None] | None = None, echo: Callable[[str], None] | None = None) -> int:
    """Run each entry of `processes` (the listeners it serves) as a forked worker until SIGTERM or
    SIGINT; `on_ready` once all listen. Returns the exit status for the command."""
    echo = echo or (lambda msg: print(msg, file=sys.stderr, flush=True))
    try:
        for listeners in processes:
            for listener in listeners:
                _reserve(listener)
    except OSError as exc:
        echo(f"cannot listen on {listener.host}:{listener.port}: {exc.strerror or exc}")
        _release(processes)
        return 1
    read_fd, write_fd = os.pipe()
    pids: dict[int, tuple[int, float]] = {}  # pid -> (worker number, started)
    stopping = False

    def spawn(number: int) -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            os.close(read_fd)
            _worker(number, processes[number], grace_s, write_fd)
        pids[pid] = (number, time.monotonic())

    def stop(signum: int, _frame) -> None:
        nonlocal stopping
        stopping = True
        for pid in list(pids):
            try:
                os.kill(pid, signum)
            except ProcessLookupError:
                pass

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        for number in range(len(processes)):
            spawn(number)
        if not _await_ready(read_fd, len(processes), pids) or stopping:
            failed = not stopping  # a signal meanwhile is a normal stop; else a worker died starting
            if failed:
                echo("a worker exited before it listened (its error is above); stopping the others")
            stop(signal.SIGTERM, None)
            _reap_all(pids)
            return 1 if failed else 0
        if on_ready is not None:
            on_ready()
        return _supervise(pids, spawn, lambda: stopping, echo, stop)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        os.close(read_fd)
        os.close(write_fd)
        _release(processes)


def _release(processes: list[list[Listener]]) -> None:
    for listeners in processes:
        for listener in listeners:
            if listener._reserved is not None:
                listener._reserved.close()
                listener._reserved = None


def _await_ready(read_fd: int, count: int, pids: dict[int, tuple[int, float]]) -> bool:
    """True once every worker wrote its number; False when one died first."""
    ready: set[int] = set()
    buffered = b""
    while len(ready) < count:
        try:
            readable, _, _ = select.select([read_fd], [], [], 0.2)
        except InterruptedError:
            continue
        if readable:
            chunk = os.read(read_fd, 4096)
            buffered += chunk
            *lines, buffered = buffered.split(b"\n")
            ready.update(int(n) for n in lines if n)
        pid, _status = os.waitpid(-1, os.WNOHANG)
        if pid:
            pids.pop(pid, None)
            return False
    return True


def _supervise(pids: dict[int, tuple[int, float]], spawn: Callable[[int], None], stopping: Callable[[], bool],
               echo: Callable[[str], None], stop: Callable[[int, object], None]) -> int:
    fast_deaths = 0
    while pids:
        try:
            pid, status = os.wait()
        except ChildProcessError:
            break
        number, started = pids.pop(pid, (None, 0.0))
        if number is None or stopping():
            continue
        lived = time.monotonic() - started
        fast_deaths = fast_deaths + 1 if lived < FAST_EXIT_S else 0
        echo(f"worker {number} (pid {pid}) exited with status {os.waitstatus_to_exitcode(status)} "
             f"after {lived:.1f} s; " + ("stopping: it keeps dying" if fast_deaths >= CRASH_LOOP else "starting it again"))
        if fast_deaths >= CRASH_LOOP:
            stop(signal.SIGTERM, None)
            _reap_all(pids)
            return 1
        spawn(number)
    return 0


def _reap_all(pids: dict[int, tuple[int, float]]) -> None:
    while pids:
        try:
            pid, _ = os.wait()
        except ChildProcessError:
            return
        pids.pop(pid, None)
