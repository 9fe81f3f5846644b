"""`make` installs the venv with uv from the very package sources pip is configured with, so a
machine whose packages come from a local wheel directory and extra indexes gets the same pins."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

_spec = importlib.util.spec_from_file_location("install_venv", Path(__file__).parents[1] / "tools" / "install_venv.py")
install_venv = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(install_venv)


def test_uv_gets_the_wheel_directory_indexes_and_constraints_pip_is_configured_with(monkeypatch, tmp_path):
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)  # only what this test sets
    monkeypatch.setenv("PIP_FIND_LINKS", "/srv/wheels")
    monkeypatch.setenv("PIP_EXTRA_INDEX_URL", "file:///srv/pypi/simple file:///srv/more/simple")
    monkeypatch.setenv("PIP_INDEX_URL", "https://mirror.example/simple")
    monkeypatch.setenv("PIP_CONSTRAINT", str(tmp_path / "site-caps.txt"))

    pip = install_venv.pip_settings(sys.executable)
    argv = install_venv.uv_argv("uv", "/v/bin/python", "constraints.txt", ["-e", ".[test]"], pip)

    pairs = list(zip(argv, argv[1:]))
    assert ("--find-links", "/srv/wheels") in pairs
    assert ("--extra-index-url", "file:///srv/pypi/simple") in pairs
    assert ("--extra-index-url", "file:///srv/more/simple") in pairs
    assert ("--index-url", "https://mirror.example/simple") in pairs
    assert ("-c", "constraints.txt") in pairs and ("-c", str(tmp_path / "site-caps.txt")) in pairs
    assert ("--index-strategy", "unsafe-best-match") in pairs  # a pin is looked for on every index, as pip does
    assert argv[-2:] == ["-e", ".[test]"] and ("--python", "/v/bin/python") in pairs


def test_without_pip_configuration_uv_uses_its_default_index_only(monkeypatch):
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    for name in [k for k in os.environ if k.startswith("PIP_") and k != "PIP_CONFIG_FILE"]:
        monkeypatch.delenv(name)
    pip = install_venv.pip_settings(sys.executable)
    argv = install_venv.uv_argv("uv", "/v/bin/python", "constraints.txt", ["."], pip)
    assert not {"--find-links", "--extra-index-url", "--index-url"} & set(argv)
