"""Install the coding-agent CLIs pinned in tests/clients/package-lock.json (npm) and
tests/clients/pypi-clients.txt (PyPI) into cache directories.

`python -m tests.clients.install` (the Makefile's `clients` step) and the suite's session fixture
both call `ensure()`. The install is cached outside the checkout, one directory per lock file
(`$MEMPLANE_CLI_CACHE`, else `$XDG_CACHE_HOME/memplane/npm-clis`, else `~/.cache/memplane/npm-clis`):
a fresh clone reuses it instead of installing ~900 MB again, and a changed lock file gets a directory
of its own. A file lock keeps two pytest-xdist workers from installing at once. Only the npm registry
is contacted for those.
The same lock pins `@openai/agents`, a library rather than a CLI: tests/clients/agents_sdk.cjs
finds it under `cache_dir() / "node_modules"` through NODE_PATH.

The PyPI clients (aider, gptme) each go into a venv of their own,
`~/.cache/memplane/py-clis/<digest of its pinned line>/venv` (`$MEMPLANE_PY_CLI_CACHE` moves it),
made with the uv memplane's own venv is made with (tools/install_venv.py), from the package sources
pip is configured with; their pinned dependencies never meet memplane's nor each other's (aider's and
gptme's cannot share a venv). `ensure_pypi()` raises FileNotFoundError when that cannot be done (this
Python is outside the client's range, no venv, the package cannot be had), and the tests skip with
its reason.
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
BINS = {"claude": "claude", "codex": "codex", "qwen": "qwen", "opencode": "opencode", "continue": "cn", "pi": "pi"}
PYPI_BINS = {"aider": "aider-chat", "gptme": "gptme"}  # binary -> the package pinned in pypi-clients.txt
PYPI_PYTHON = {"aider": ((3, 10), (3, 13)),  # aider-chat 0.86: Requires-Python >=3.10,<3.13
               "gptme": ((3, 10), (3, 15))}  # gptme 0.35: >=3.10,<3.15


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


def pypi_requirements() -> dict[str, str]:
    """Each PyPI client's pinned requirement line (`name==version`), by the name of its binary."""
    lines = [line.split("#")[0].strip() for line in (HERE / "pypi-clients.txt").read_text().splitlines()]
    pins = {line.split("==")[0].strip().lower(): line for line in lines if line}
    return {binary: pins[package] for binary, package in PYPI_BINS.items() if package in pins}


def _pypi_digest(requirement: str) -> str:
    return hashlib.sha256(requirement.encode()).hexdigest()


def pypi_cache_dir(requirement: str) -> Path:
    """The venv directory of one pinned client: a directory per requirement line, so one client's
    new pin does not reinstall the others."""
    base = os.environ.get("MEMPLANE_PY_CLI_CACHE")
    if not base:
        xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
        base = str(Path(xdg) / "memplane" / "py-clis")
    return Path(base) / _pypi_digest(requirement)[:16]


def pypi_installed(name: str) -> Path | None:
    """The client's binary when its venv holds the pinned install, else None."""
    requirement = pypi_requirements().get(name)
    if requirement is None:
        return None
    cache = pypi_cache_dir(requirement)
    stamp = cache / ".installed"
    if not stamp.exists() or stamp.read_text().strip() != _pypi_digest(requirement):
        return None
    path = cache / "venv" / "bin" / name
    return path if path.exists() else None


def _python(name: str) -> str:
    """A Python the client runs on: this one when it is in the client's range, else the newest in it."""
    low, high = PYPI_PYTHON[name]
    if low <= sys.version_info[:2] < high:
        return sys.executable
    for minor in range(high[1] - 1, low[1] - 1, -1):
        found = shutil.which(f"python3.{minor}")
        if found:
            return found
    raise FileNotFoundError(f"no Python {low[0]}.{low[1]}-{high[0]}.{high[1] - 1} for the PyPI coding client "
                            f"{name} (tests/clients/pypi-clients.txt)")


def _install_pypi(name: str, requirement: str) -> None:
    sys.path.insert(0, str(ROOT / "tools"))
    from install_venv import cached_uv, pip_settings, uv_argv

    python = _python(name)
    cache = pypi_cache_dir(requirement)
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if pypi_installed(name):
            return
        requirements = cache / "requirements.txt"
        requirements.write_text(requirement + "\n")
        venv = cache / "venv"
        shutil.rmtree(venv, ignore_errors=True)
        made = subprocess.run([python, "-m", "venv", "--without-pip", str(venv)], capture_output=True, text=True)
        if made.returncode != 0:
            raise FileNotFoundError(f"cannot make a venv for the PyPI coding client {name}: "
                                    f"{made.stderr.strip()[-300:]}")
        uv = cached_uv(str(ROOT / "constraints.txt"))
        target = str(venv / "bin" / "python")
        done = None
        if uv is not None:
            argv = uv_argv(uv, target, str(requirements), ["-r", str(requirements)], pip_settings(sys.executable))
            done = subprocess.run(argv, stdout=sys.stderr)
        if done is None or done.returncode != 0:
            subprocess.run([target, "-m", "ensurepip"], stdout=subprocess.DEVNULL, check=True)
            subprocess.run([target, "-m", "pip", "install", "--quiet", "--no-compile", "-r", str(requirements)],
                           stdout=sys.stderr, check=True)
        (cache / ".installed").write_text(_pypi_digest(requirement))


def ensure_pypi(*names: str) -> dict[str, Path]:
    """The named PyPI clients' binaries (all of them without names), each installed first into a venv
    of its own if needed (see the module docstring). Raises FileNotFoundError for a client that
    cannot be installed here."""
    pins = pypi_requirements()
    out: dict[str, Path] = {}
    for name in names or tuple(pins):
        if name not in pins:
            raise FileNotFoundError(f"{name} is not pinned in tests/clients/pypi-clients.txt")
        found = pypi_installed(name)
        if found is None:
            try:
                _install_pypi(name, pins[name])
            except subprocess.CalledProcessError as exc:
                raise FileNotFoundError(f"the PyPI coding client {name} could not be installed: {exc}") from exc
            found = pypi_installed(name)
        if found is None:
            raise RuntimeError(f"the PyPI coding client {name} installed but is missing under "
                               f"{pypi_cache_dir(pins[name])}")
        out[name] = found
    return out


if __name__ == "__main__":
    try:
        print("\n".join(f"{k}: {v}" for k, v in ensure().items()))
    except FileNotFoundError as exc:
        print(f"skipped: {exc}", file=sys.stderr)
    for client in pypi_requirements():  # each on its own: one that cannot be had here leaves the others
        try:
            print("\n".join(f"{k}: {v}" for k, v in ensure_pypi(client).items()))
        except (FileNotFoundError, RuntimeError) as exc:
            print(f"skipped: {exc}", file=sys.stderr)
