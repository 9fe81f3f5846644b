# memplane: `make run` starts memplane on embedded defaults, `make test` runs the test suite.
# Both create .venv and install memplane into it on first use.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.memplane-installed
TEST_STAMP := $(VENV)/.memplane-test-installed

.PHONY: run test clients demo bench bench-quality clean

# Dense recall needs no torch: the int8 MiniLM ships in memory_adapters/engine/model/ and runs on
# onnxruntime (a core dependency). Rebuilding that graph is a maintainer's job: `pip install -e '.[export]'`.
# --no-compile: Python compiles only the modules memplane imports, when it first imports them, instead
# of pip compiling every file of every package (~115 MB of .pyc, most never used; bench/README.md).

# `make run` installs what memplane runs on (~256 MB); `make test` adds the test tools and the seven
# client frameworks the suite drives (~580 MB in all).

# tools/install_venv.py makes the venv and installs with uv (~6 s) from the sources pip is configured with,
# or with pip (~60 s).
$(STAMP): pyproject.toml constraints.txt tools/install_venv.py
	$(PYTHON) tools/install_venv.py $(VENV) constraints.txt -e ".[speed]"
	touch $(STAMP)

$(TEST_STAMP): pyproject.toml constraints.txt tools/install_venv.py
	$(PYTHON) tools/install_venv.py $(VENV) constraints.txt -e ".[test,speed]"
	touch $(STAMP) $(TEST_STAMP)

# The coding-agent CLIs the suite drives: from npm Claude Code, Codex, Qwen Code, opencode and Continue
# (tests/clients/package-lock.json) go into ~/.cache/memplane/npm-clis/<lock digest> once
# (MEMPLANE_CLI_CACHE moves it): every clone on the machine shares that install, and a changed lock file
# gets its own. From PyPI aider and gptme (tests/clients/pypi-clients.txt) each go into a venv of their own
# under ~/.cache/memplane/py-clis/<digest of the pin> (MEMPLANE_PY_CLI_CACHE), so their pinned dependencies
# never meet memplane's. When they are there this step only checks their stamps. Without npm, or without a
# Python a client runs on, it says so and those tests skip with that reason.
clients: $(TEST_STAMP)
	@$(BIN)/python -m tests.clients.install >/dev/null

run: $(STAMP)
	$(BIN)/memplane up

# -n: one pytest-xdist worker per core (at most 3: each gets its own Redis db, 13-15, tests/conftest.py);
# -p no:langsmith_plugin: langsmith (pulled in by langgraph) registers a pytest plugin that costs 0.5 s per
# worker and that memplane never uses. `.venv/bin/python -m pytest tests/x.py` still runs in one process.
# PYTHONDONTWRITEBYTECODE (set on some hosts) is lifted for the suite: every worker and every memplane
# process a test starts would otherwise compile each module it imports from source again (~3-4 s of
# CPU a process); with it lifted Python writes .pyc for the modules actually imported, once.
test: $(TEST_STAMP) clients
	env -u PYTHONDONTWRITEBYTECODE $(BIN)/python -m pytest -n auto --maxprocesses=3 --dist loadgroup -p no:langsmith_plugin

demo: $(STAMP)
	$(BIN)/memplane demo

bench: $(TEST_STAMP)
	$(BIN)/python -m bench.run_all

bench-quality: $(TEST_STAMP)
	$(BIN)/python -m bench.quality.locomo

clean:
	rm -rf $(VENV) .memplane *.egg-info
