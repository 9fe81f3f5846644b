"""Install the coding-agent CLIs pinned in tests/clients/package-lock.json into .cache/npm-clis.

`python -m tests.clients.install` (the Makefile's `clients` step) and the suite's session fixture
both call `ensure()`. The install is cached: it runs again only when the lock file changes. A file
lock keeps two pytest-xdist workers from installing at once. Only the npm registry is contacted.
"""

from __future__ import annotations

import fcntl
import hashlib
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).parent
ROOT = HERE.parent.parent
CACHE = ROOT / ".cache" / "npm-clis"
BINS = {"claude": "claude", "codex": "codex", "qwen": "qwen"}


def _lock_digest() -> str:
    return hashlib.sha256((HERE / "package-lock.json").read_bytes()).hexdigest()


def installed() -> dict[str, Path] | None:
    """The CLIs' paths when the cache holds the pinned install, else None."""
    stamp = CACHE / ".installed"
    if not stamp.exists() or stamp.read_text().strip() != _lock_digest():
        return None
    paths = {name: CACHE / "node_modules" / ".bin" / b for name, b in BINS.items()}
    return paths if all(p.exists() for p in paths.values()) else None


def ensure() -> dict[str, Path]:
    """The CLIs' paths, installing them first if needed. Raises FileNotFoundError without npm."""
    found = installed()
    if found:
        return found
    npm = shutil.which("npm")
    if npm is None:
        raise FileNotFoundError("npm is not installed: the coding-agent CLIs (tests/clients) cannot be installed")
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        found = installed()
        if found:
            return found
        for name in ("package.json", "package-lock.json"):
            shutil.copyfile(HERE / name, CACHE / name)
        # `npm install` with the lock file in place installs the locked versions (`npm ci` refuses this
        # lock: npm leaves other platforms' optional native packages out of it and then calls it stale).
        subprocess.run([npm, "install", "--no-audit", "--no-fund", "--loglevel=error"], cwd=CACHE, check=True,
                       stdout=sys.stderr)
        (CACHE / ".installed").write_text(_lock_digest())
    found = installed()
    if found is None:
        raise RuntimeError(f"npm install finished but the CLIs are missing under {CACHE}")
    return found


if __name__ == "__main__":
    try:
        print("\n".join(f"{k}: {v}" for k, v in ensure().items()))
    except FileNotFoundError as exc:
        print(f"skipped: {exc}", file=sys.stderr)
