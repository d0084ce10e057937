# gpufleet: `make demo` runs a real two-node training on this machine; `make test` runs the whole suite.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.gpufleet-installed
PYTEST_ARGS ?=

# Debian packages the container cluster of the multi-node tests needs (see shared/TESTBED.md).
SYSTEM_PACKAGES := podman runc debootstrap uidmap slirp4netns openssh-client catatonit gnupg

.PHONY: demo test venv system-packages unit integration cluster molecule lint sanity bench collection clean

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import ensurepip' 2>/dev/null || scripts/install-system-packages.sh python3-venv
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet '.[demo,test]'
	touch $@

venv: $(STAMP)

demo: venv
	$(BIN)/ansible-playbook playbooks/train.yml -e script=examples/train.py

test: venv system-packages lint sanity
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/python -m pytest $(PYTEST_ARGS) tests
	$(MAKE) molecule

system-packages:
	scripts/install-system-packages.sh $(SYSTEM_PACKAGES)

unit: venv
	$(BIN)/python -m pytest $(PYTEST_ARGS) tests/unit

integration: venv
	$(BIN)/python -m pytest $(PYTEST_ARGS) tests/integration

cluster: venv system-packages
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/python -m pytest $(PYTEST_ARGS) tests/cluster

molecule: venv system-packages
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/molecule test

lint: venv
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/ansible-lint --profile production

sanity: venv
	PATH=$(CURDIR)/$(BIN):$$PATH tests/sanity/run.sh

bench: venv
	$(BIN)/python bench/launch_overhead.py

collection: venv
	$(BIN)/ansible-galaxy collection build --force --output-path build .

clean:
	rm -rf build logs tests/output .pytest_cache
