# memplane: `make run` starts memplane on embedded defaults, `make test` runs the test suite.
# Both create .venv and install memplane into it on first use.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.memplane-installed

.PHONY: run test demo bench bench-quality clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test,speed]'
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
	$(BIN)/python -m bench.quality.run

clean:
	rm -rf $(VENV) .memplane *.egg-info
