"""Install memplane into its venv: with uv when it can, with pip otherwise.

A fresh clone's `make test` spent ~55 s of its 3 minutes in pip installing the ~200 pinned packages
on a 2-core machine; uv installs the same pins in ~6 s. uv reads none of pip's configuration, so
the package sources pip is set up with on this machine (`pip config list`: pip.conf files and PIP_*
variables — index-url, extra-index-url, find-links, constraint) are handed to it, and every index
is searched for a pinned version as pip searches them (`--index-strategy unsafe-best-match`). When
uv cannot be had or fails, pip installs exactly as before.

    python tools/install_venv.py <venv python> <constraints file> <requirement>...
"""

from __future__ import annotations

import re
import subprocess
import sys

_SETTING = re.compile(r"^[^.]*\.([\w-]+)='(.*)'$")  # `global.find-links='/opt/wheels'`, `:env:.cert='...'`


def pip_settings(python: str) -> dict[str, list[str]]:
    """pip's configured values by key, each list in pip's order of precedence, without repeats."""
    listed = subprocess.run([python, "-m", "pip", "config", "list"], capture_output=True, text=True).stdout
    out: dict[str, list[str]] = {}
    for line in listed.splitlines():
        m = _SETTING.match(line.strip())
        if m:
            values = out.setdefault(m[1], [])
            values += [v for v in m[2].split() if v not in values]
    return out


def uv_argv(python: str, constraints: str, requirements: list[str], pip: dict[str, list[str]]) -> list[str]:
    argv = [python, "-m", "uv", "pip", "install", "--quiet", "--python", python,
            "--index-strategy", "unsafe-best-match", "-c", constraints]
    if pip.get("index-url"):
        argv += ["--index-url", pip["index-url"][0]]
    for url in pip.get("extra-index-url", []):
        argv += ["--extra-index-url", url]
    for place in pip.get("find-links", []):
        argv += ["--find-links", place]
    for extra in pip.get("constraint", []):
        argv += ["-c", extra]
    return argv + requirements


def main(python: str, constraints: str, *requirements: str) -> int:
    quiet = {"stdout": subprocess.DEVNULL}
    has_uv = subprocess.run([python, "-m", "pip", "install", "--quiet", "-c", constraints, "uv"], **quiet).returncode == 0
    if has_uv:
        if subprocess.run(uv_argv(python, constraints, list(requirements), pip_settings(python))).returncode == 0:
            return 0
        print("install_venv: uv could not install; pip takes over", file=sys.stderr)
    subprocess.run([python, "-m", "pip", "install", "--quiet", "--upgrade", "pip"], check=True)
    return subprocess.run([python, "-m", "pip", "install", "--quiet", "--no-compile", "-c", constraints,
                           *requirements]).returncode


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
