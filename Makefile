# gpufleet: `make demo` runs a real two-node training on this machine; `make test` runs the whole suite.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.gpufleet-installed
PYTEST_ARGS ?=

# Debian packages the container cluster of the multi-node tests needs (see shared/TESTBED.md), and the browser the
# integration tests open a job's report.html in (tests/integration/browser.py).
SYSTEM_PACKAGES := podman runc debootstrap uidmap slirp4netns openssh-client catatonit gnupg iptables chromium

.PHONY: demo test lint-and-sanity test-cluster test-cluster-integration cluster-streams test-molecule setup prepare venv system-packages tools unit integration cluster molecule lint sanity bench \
	bench-gang-stop bench-launcher-exit bench-spare bench-scale bench-provision collection clean docs

$(STAMP): pyproject.toml setup.py
	@$(PYTHON) -c 'import ensurepip' 2>/dev/null || scripts/install-system-packages.sh python3-venv
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet '.[demo,test]'
	@# The tools only: the collection under test is this checkout (collections/ links back here), not a copy
	@# installed into site-packages that would go stale with every edit.
	$(BIN)/python -m pip uninstall --quiet --yes gpufleet
	touch $@

venv: $(STAMP)

demo: venv
	$(BIN)/ansible-playbook playbooks/train.yml -e script=examples/train.py

# Each stage's wall time is printed at the end. The test cluster's image and wheelhouse are prepared in the
# background while lint, sanity, the unit and the integration tests run (they are disk and network, those CPU).
# Provisioning runs once: the cluster stage's fixture runs provision.yml's converge, idempotence and check (what
# molecule's converge, idempotence and check steps do) and keeps the cluster; the molecule stage runs molecule's
# verifiers on it, then takes it down. `make molecule` runs the whole scenario on a cluster of its own.
KEPT_CLUSTER := $(CURDIR)/.cache/cluster-state

# The integration tests run in the cluster stage, in its second stream after the modules with nodes of their own
# (scripts/cluster-streams.sh says why): the stage's name in the table says so.
# lint and sanity side by side (each one's output kept together, printed when it ends): they write only ignored
# folders, and sanity copies only the files git does not ignore.
test:
	@scripts/timed-stages.sh setup lint+sanity=lint-and-sanity unit cluster+integration=test-cluster-integration \
	  molecule=test-molecule

lint-and-sanity: venv
	$(MAKE) --no-print-directory -j2 --output-sync=target lint sanity

test-cluster: venv system-packages
	$(MAKE) --no-print-directory cluster-streams STREAMS_ARGS=

test-cluster-integration: venv system-packages
	$(MAKE) --no-print-directory cluster-streams STREAMS_ARGS=--integration

cluster-streams:
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/python tests/cluster/testbed.py prepare --wait-background
	rm -rf $(KEPT_CLUSTER)
	@# Two streams side by side: the session cluster's modules and those with nodes of their own (the script says
	@# which); --durations in each: the slowest tests and fixtures, so that the stage's time can be read.
	PATH=$(CURDIR)/$(BIN):$$PATH PYTHON=$(BIN)/python scripts/cluster-streams.sh $(STREAMS_ARGS) $(KEPT_CLUSTER) \
	  $(PYTEST_ARGS) || { $(BIN)/python tests/cluster/testbed.py down --state $(KEPT_CLUSTER); exit 1; }

test-molecule: venv system-packages
	PATH=$(CURDIR)/$(BIN):$$PATH GPUFLEET_TESTBED_KEEP=$(KEPT_CLUSTER) $(BIN)/molecule verify; \
	  rc=$$?; $(BIN)/python tests/cluster/testbed.py down --state $(KEPT_CLUSTER); exit $$rc

setup: venv system-packages tools prepare

# promtool and prometheus, the tests' judges of what Prometheus accepts: out of the distribution's package, not installed.
tools:
	scripts/fetch-prometheus.sh .cache/prometheus

prepare: venv system-packages
	@mkdir -p .cache
	@(PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/python tests/cluster/testbed.py prepare > .cache/prepare.log 2>&1; \
	  echo $$? > .cache/prepare.rc) &

system-packages:
	scripts/install-system-packages.sh $(SYSTEM_PACKAGES)

# The unit tests in UNIT_WORKERS processes (pytest-xdist): most of their time is spent waiting on the supervisors'
# timers (the CPU was 5 % busy for two of the stage's three and a half minutes), so 4 on 2 cores took 94 s where
# one took 208 s; 6 and 8 were slower (each worker collects the whole suite).
UNIT_WORKERS ?= 4

unit: venv
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/python -m pytest -n $(UNIT_WORKERS) $(PYTEST_ARGS) tests/unit

integration: venv
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/python -m pytest $(PYTEST_ARGS) tests/integration

cluster: venv system-packages
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/python tests/cluster/testbed.py prepare --wait-background
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/python -m pytest $(PYTEST_ARGS) tests/cluster

molecule: venv system-packages
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/molecule test

# ansible-lint; antsibull-docs's lint of every plugin doc and argument spec; the docsite built from them
# (warnings are errors), and the changelog's fragments.
lint: venv
	PATH=$(abspath $(BIN)):$$PATH $(BIN)/ansible-lint --profile production
	cd collections/ansible_collections/gpufleet/cluster && PATH=$(abspath $(BIN)):$$PATH ANSIBLE_COLLECTIONS_PATH=$(CURDIR)/collections \
	  $(abspath $(BIN))/antsibull-docs lint-collection-docs --plugin-docs .
	PATH=$(abspath $(BIN)):$$PATH scripts/build-docsite.sh
	cd collections/ansible_collections/gpufleet/cluster && $(abspath $(BIN))/antsibull-changelog lint

docs: venv
	PATH=$(CURDIR)/$(BIN):$$PATH scripts/build-docsite.sh

sanity: venv
	PATH=$(CURDIR)/$(BIN):$$PATH tests/sanity/run.sh

bench: venv
	$(BIN)/python bench/launch_overhead.py

# Fault -> nothing left on any node, median of 3 runs of each of five faults on the 3-node container cluster.
bench-gang-stop: venv system-packages
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/python bench/gang_stop.py

# torchrun's end on one node (a rank killed; a stop): python -m against the job folder's launcher_entry.py.
bench-launcher-exit: venv
	$(BIN)/python bench/launcher_exit.py $(BENCH_ARGS)

# A node's container stopped -> every rank of the restart on the spare past init_process_group, median of 3.
bench-spare: venv system-packages
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/python bench/spare_recovery.py

collection: venv
	$(BIN)/ansible-galaxy collection build --force --output-path build .

clean:
	rm -rf build logs tests/output .pytest_cache

# Launch (train.yml against one ssh per node), gang stop and re-provision at 2, 4, 8 and 16 container nodes, and
# the control path at 64 (bench/scale.py); writes logs/bench/scale.json and scale.png. About an hour.
bench-scale: venv system-packages
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/python bench/scale.py $(BENCH_ARGS)

# provision.yml's re-run and first run: wall, controller CPU and task results per node, against a baseline commit
# in the same run (BENCH_ARGS="--baseline <commit> --fresh 4 --profile"); writes logs/bench/provision_cost.json.
bench-provision: venv system-packages
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/python bench/provision_cost.py $(BENCH_ARGS)

