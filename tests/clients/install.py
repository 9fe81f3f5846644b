"""Install the coding-agent CLIs pinned in tests/clients/package-lock.json into a cache directory.

`python -m tests.clients.install` (the Makefile's `clients` step) and the suite's session fixture
both call `ensure()`. The install is cached outside the checkout, one directory per lock file
(`$MEMPLANE_CLI_CACHE`, else `$XDG_CACHE_HOME/memplane/npm-clis`, else `~/.cache/memplane/npm-clis`):
a fresh clone reuses it instead of installing ~900 MB again, and a changed lock file gets a directory
of its own. A file lock keeps two pytest-xdist workers from installing at once. Only the npm registry
is contacted.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).parent
ROOT = HERE.parent.parent
BINS = {"claude": "claude", "codex": "codex", "qwen": "qwen"}


def _lock_digest() -> str:
    return hashlib.sha256((HERE / "package-lock.json").read_bytes()).hexdigest()


def cache_dir() -> Path:
    """Where the pinned install lives: a directory per lock file, outside the checkout."""
    base = os.environ.get("MEMPLANE_CLI_CACHE")
    if not base:
        xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
        base = str(Path(xdg) / "memplane" / "npm-clis")
    return Path(base) / _lock_digest()[:16]


def installed() -> dict[str, Path] | None:
    """The CLIs' paths when the cache holds the pinned install, else None."""
    cache = cache_dir()
    stamp = cache / ".installed"
    if not stamp.exists() or stamp.read_text().strip() != _lock_digest():
        return None
    paths = {name: cache / "node_modules" / ".bin" / b for name, b in BINS.items()}
    return paths if all(p.exists() for p in paths.values()) else None


def ensure() -> dict[str, Path]:
    """The CLIs' paths, installing them first if needed. Raises FileNotFoundError without npm."""
    found = installed()
    if found:
        return found
    npm = shutil.which("npm")
    if npm is None:
        raise FileNotFoundError("npm is not installed: the coding-agent CLIs (tests/clients) cannot be installed")
    cache = cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        found = installed()
        if found:
            return found
        for name in ("package.json", "package-lock.json"):
            shutil.copyfile(HERE / name, cache / name)
        # `npm install` with the lock file in place installs the locked versions (`npm ci` refuses this
        # lock: npm leaves other platforms' optional native packages out of it and then calls it stale).
        subprocess.run([npm, "install", "--no-audit", "--no-fund", "--loglevel=error"], cwd=cache, check=True,
                       stdout=sys.stderr)
        (cache / ".installed").write_text(_lock_digest())
    found = installed()
    if found is None:
        raise RuntimeError(f"npm install finished but the CLIs are missing under {cache}")
    return found


if __name__ == "__main__":
    try:
        print("\n".join(f"{k}: {v}" for k, v in ensure().items()))
    except FileNotFoundError as exc:
        print(f"skipped: {exc}", file=sys.stderr)
