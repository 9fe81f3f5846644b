"""Install the coding-agent CLIs pinned in tests/clients/package-lock.json (npm) and
tests/clients/pypi-clients.txt (PyPI) into cache directories.

`python -m tests.clients.install` (the Makefile's `clients` step) and the suite's session fixture
both call `ensure()`. The install is cached outside the checkout, one directory per lock file
(`$MEMPLANE_CLI_CACHE`, else `$XDG_CACHE_HOME/memplane/npm-clis`, else `~/.cache/memplane/npm-clis`):
a fresh clone reuses it instead of installing ~900 MB again, and a changed lock file gets a directory
of its own. A file lock keeps two pytest-xdist workers from installing at once. Only the npm registry
is contacted for those.

The PyPI clients (aider) go into a venv of their own, `~/.cache/memplane/py-clis/<digest>/venv`
(`$MEMPLANE_PY_CLI_CACHE` moves it), made with the uv memplane's own venv is made with
(tools/install_venv.py), from the package sources pip is configured with; their pinned
dependencies never meet memplane's. `ensure_pypi()` raises FileNotFoundError when that cannot be done
(this Python is outside the client's range, no venv), and the tests skip with its reason.
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
BINS = {"claude": "claude", "codex": "codex", "qwen": "qwen", "opencode": "opencode"}
PYPI_BINS = {"aider": "aider"}
PYPI_PYTHON = ((3, 10), (3, 13))  # aider-chat 0.86: Requires-Python >=3.10,<3.13


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


def _pypi_digest() -> str:
    return hashlib.sha256((HERE / "pypi-clients.txt").read_bytes()).hexdigest()


def pypi_cache_dir() -> Path:
    base = os.environ.get("MEMPLANE_PY_CLI_CACHE")
    if not base:
        xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
        base = str(Path(xdg) / "memplane" / "py-clis")
    return Path(base) / _pypi_digest()[:16]


def pypi_installed() -> dict[str, Path] | None:
    cache = pypi_cache_dir()
    stamp = cache / ".installed"
    if not stamp.exists() or stamp.read_text().strip() != _pypi_digest():
        return None
    paths = {name: cache / "venv" / "bin" / b for name, b in PYPI_BINS.items()}
    return paths if all(p.exists() for p in paths.values()) else None


def _python() -> str:
    """A Python the PyPI clients run on: this one when it is in their range, else python3.12…3.10."""
    low, high = PYPI_PYTHON
    if low <= sys.version_info[:2] < high:
        return sys.executable
    for minor in range(high[1] - 1, low[1] - 1, -1):
        found = shutil.which(f"python3.{minor}")
        if found:
            return found
    raise FileNotFoundError(f"no Python {low[0]}.{low[1]}-{high[0]}.{high[1] - 1} for the PyPI coding clients "
                            f"(tests/clients/pypi-clients.txt)")


def ensure_pypi() -> dict[str, Path]:
    """The PyPI clients' paths, installing them first if needed (see the module docstring)."""
    found = pypi_installed()
    if found:
        return found
    sys.path.insert(0, str(ROOT / "tools"))
    from install_venv import cached_uv, pip_settings, uv_argv

    python = _python()
    cache = pypi_cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    requirements = str(HERE / "pypi-clients.txt")
    with open(cache / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        found = pypi_installed()
        if found:
            return found
        venv = cache / "venv"
        shutil.rmtree(venv, ignore_errors=True)
        made = subprocess.run([python, "-m", "venv", "--without-pip", str(venv)], capture_output=True, text=True)
        if made.returncode != 0:
            raise FileNotFoundError(f"cannot make a venv for the PyPI coding clients: {made.stderr.strip()[-300:]}")
        uv = cached_uv(str(ROOT / "constraints.txt"))
        target = str(venv / "bin" / "python")
        done = None
        if uv is not None:
            argv = uv_argv(uv, target, requirements, ["-r", requirements], pip_settings(sys.executable))
            done = subprocess.run(argv, stdout=sys.stderr)
        if done is None or done.returncode != 0:
            subprocess.run([target, "-m", "ensurepip"], stdout=subprocess.DEVNULL, check=True)
            subprocess.run([target, "-m", "pip", "install", "--quiet", "--no-compile", "-r", requirements],
                           stdout=sys.stderr, check=True)
        (cache / ".installed").write_text(_pypi_digest())
    found = pypi_installed()
    if found is None:
        raise RuntimeError(f"the PyPI coding clients installed but are missing under {cache}")
    return found


if __name__ == "__main__":
    try:
        print("\n".join(f"{k}: {v}" for k, v in ensure().items()))
    except FileNotFoundError as exc:
        print(f"skipped: {exc}", file=sys.stderr)
    try:
        print("\n".join(f"{k}: {v}" for k, v in ensure_pypi().items()))
    except FileNotFoundError as exc:
        print(f"skipped: {exc}", file=sys.stderr)
