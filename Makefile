# Fresh machine: `make demo` or `make test`. Both create .venv when it is missing.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
# The torch build to install first. The default pair is the one this project is developed and
# tested with (on the build machines it installs from local disk); override on other machines,
# e.g. `make test TORCH="torch torchvision"`.
TORCH  ?= torch==2.14.1 torchvision==0.29.1
# Test processes (pytest-xdist; one test file per process at a time): `make test TEST_WORKERS=8` on a larger machine.
TEST_WORKERS ?= 2

.PHONY: demo test install install-test clean bench-deps

$(VENV)/.torch:
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q $(TORCH) || $(PIP) install -q "torch>=2.4" torchvision
	touch $@

$(VENV)/.installed: $(VENV)/.torch pyproject.toml
	$(PIP) install -q -e .
	touch $@

$(VENV)/.installed-test: $(VENV)/.installed
	$(PIP) install -q -e ".[test]"
	$(PIP) install -q --no-deps "robustbench==1.1.1"   # RobustBench export (tests/report), its zoo (robustbench: models)
	touch $@

install: $(VENV)/.installed
install-test: $(VENV)/.installed-test

demo: $(VENV)/.installed
	$(VENV)/bin/robustvit demo

test: $(VENV)/.installed-test
	$(PY) -m pytest -q -p no:cacheprovider -n $(TEST_WORKERS) --dist loadfile

clean:
	rm -rf $(VENV) demo-out build *.egg-info src/*.egg-info
