"""Make memplane's venv and install into it: with uv when it can, with pip otherwise.

A fresh clone's `make test` spent ~60 s of its 3 minutes making the venv with pip (ensurepip, then
the ~200 pinned packages); uv installs the same pins in ~6 s. uv itself is installed once per
machine, beside the coding CLIs the suite drives (`~/.cache/memplane/uv-<pin>`; XDG_CACHE_HOME
moves it), from the version `constraints.txt` pins. uv reads none of pip's
configuration, so the package sources pip is set up with on this machine (`pip config list`:
pip.conf files and PIP_* variables — index-url, extra-index-url, find-links, constraint) are handed
to it, and every index is searched for a pinned version as pip searches them
(`--index-strategy unsafe-best-match`). The venv gets pip too, for whoever uses it by hand. When uv
cannot be had or fails, pip makes the install exactly as before.

    python3 tools/install_venv.py <venv dir> <constraints file> <requirement>...
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

_SETTING = re.compile(r"^[^.]*\.([\w-]+)='(.*)'$")  # `global.find-links='/opt/wheels'`, `:env:.cert='...'`
_UV_PIN = re.compile(r"^uv==([\w.]+)", re.M)


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


def uv_argv(uv: str, python: str, constraints: str, requirements: list[str], pip: dict[str, list[str]]) -> list[str]:
    argv = [uv, "pip", "install", "--quiet", "--python", python, "--index-strategy", "unsafe-best-match",
            "-c", constraints]
    if pip.get("index-url"):
        argv += ["--index-url", pip["index-url"][0]]
    for url in pip.get("extra-index-url", []):
        argv += ["--extra-index-url", url]
    for place in pip.get("find-links", []):
        argv += ["--find-links", place]
    for extra in pip.get("constraint", []):
        argv += ["-c", extra]
    return argv + requirements


def cached_uv(constraints: str) -> str | None:
    """The pinned uv, installed once per machine with this Python's pip; None when that fails."""
    pin = _UV_PIN.search(Path(constraints).read_text())
    if pin is None:
        return None
    home = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "memplane" / f"uv-{pin[1]}"
    binary = home / "bin" / "uv"
    if not binary.exists():
        done = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--target", str(home),
                               f"uv=={pin[1]}"], capture_output=True, text=True)
        if done.returncode != 0:
            said = (done.stderr.strip().splitlines() or ["no reason given"])[-1]
            print(f"install_venv: uv {pin[1]} could not be installed ({said}); pip installs instead", file=sys.stderr)
            return None
    return str(binary) if binary.exists() else None


def main(venv: str, constraints: str, *requirements: str) -> int:
    python = str(Path(venv) / "bin" / "python")
    if not Path(python).exists():
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True)
    uv = cached_uv(constraints)
    if uv is not None:
        argv = uv_argv(uv, python, constraints, ["pip", *requirements], pip_settings(sys.executable))
        if subprocess.run(argv).returncode == 0:
            return 0
        print("install_venv: uv could not install; pip takes over", file=sys.stderr)
    if subprocess.run([python, "-m", "pip", "--version"], capture_output=True).returncode != 0:
        subprocess.run([python, "-m", "ensurepip", "--upgrade"], stdout=subprocess.DEVNULL, check=True)
    subprocess.run([python, "-m", "pip", "install", "--quiet", "--upgrade", "pip"], check=True)
    return subprocess.run([python, "-m", "pip", "install", "--quiet", "--no-compile", "-c", constraints,
                           *requirements]).returncode


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
