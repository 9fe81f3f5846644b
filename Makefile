# memplane: `make run` starts memplane on embedded defaults, `make test` runs the test suite.
# Both create .venv and install memplane into it on first use.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.memplane-installed

.PHONY: run test demo bench bench-quality clean

# The embeddings extra needs torch: the CPU build is installed first so that pip never pulls a
# multi-gigabyte GPU build for it; if it cannot be installed, memplane installs without the extra
# (lexical recall only). MEMPLANE_EMBEDDINGS=off skips it on purpose.
TORCH ?= torch==2.13.0

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	if [ "$(MEMPLANE_EMBEDDINGS)" != off ] && $(BIN)/python -m pip install --quiet '$(TORCH)'; \
	then extras=test,speed,embeddings; else extras=test,speed; fi; \
	$(BIN)/python -m pip install --quiet -c constraints.txt -e ".[$$extras]"
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/memplane up

test: $(STAMP)
	$(BIN)/python -m pytest

demo: $(STAMP)
	$(BIN)/memplane demo

bench: $(STAMP)
	$(BIN)/python -m bench.run_all

bench-quality: $(STAMP)
	$(BIN)/python -m bench.quality.locomo

clean:
	rm -rf $(VENV) .memplane *.egg-info
