"""A reproducible busy machine: processes that each keep one core busy for as long as they run.

Users run memplane beside other work; a benchmark on an idle machine says little about them.
`with burners(1):` starts one spinning process (a second core's worth with 2) and stops it after.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
from collections.abc import Iterator


def _spin(parent: int) -> None:
    x = 0
    while os.getppid() == parent:  # a bench killed before it could stop us: stop by ourselves
        for _ in range(1_000_000):  # pure-Python arithmetic: one core, no memory traffic to speak of
            x = (x * 1103515245 + 12345) & 0x7FFFFFFF


@contextlib.contextmanager
def burners(n: int) -> Iterator[list[int]]:
    """Keep `n` cores busy inside the block; yields the burners' process ids."""
    procs = [multiprocessing.get_context("spawn").Process(target=_spin, args=(os.getpid(),), daemon=True)
             for _ in range(n)]
    for p in procs:
        p.start()
    try:
        yield [p.pid for p in procs]
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.join(5)


def load_average() -> str:
    try:
        return " ".join(f"{v:.2f}" for v in os.getloadavg())
    except OSError:
        return "-"
