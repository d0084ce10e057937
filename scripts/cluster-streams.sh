#!/usr/bin/env bash
# The cluster stage as two pytest runs side by side (make test-cluster), to keep make test within its hour:
#  - the session cluster's stream: the modules whose tests share the 3 provisioned nodes (tests/cluster/conftest.py's
#    `cluster`), in the foreground, keeping that cluster for the molecule stage;
#  - the own-nodes stream: the modules that start nodes of their own (Slurm's, the systemd node, the bare nodes) or
#    none (the local containers), in the background; it never starts the session cluster (GPUFLEET_TESTBED_NO_SESSION_CLUSTER
#    makes its fixture fail), and its nodes have other indices, so neither stream touches the other's nodes.
# With --integration (make test), the own-nodes stream then runs tests/integration as a pytest run of its own (each
# folder imports its own `conftest`): those run on this machine's loopback, not on any node, and the session cluster's
# stream, its critical path, leaves a core free while it runs alone (measured: the own-nodes modules end about 470 s
# before it, the session stream alone at half the machine's CPU). Neither sees the other's processes: the cluster tests
# look for a job's processes inside the nodes' containers (hostview.py, by cgroup), the integration tests for their
# own run's id.
# Each stream has its own pytest base folder (and only the first keeps pytest's cache). The own-nodes stream's output is
# printed after the session's, with each stream's wall time.
# The stage fails when either stream fails, or either run of the second.
# Usage: scripts/cluster-streams.sh [--integration] KEPT_STATE [PYTEST ARG...]
set -u
cd "$(dirname "$0")/.."
integration=0
if [ "${1:-}" = "--integration" ]; then
    integration=1
    shift
fi
kept=$1
shift
OWN_NODES_MODULES=(tests/cluster/test_slurm.py tests/cluster/test_nvidia_services.py tests/cluster/test_bare_nodes.py
                   tests/cluster/test_containers.py)
python=${PYTHON:-.venv/bin/python}
base=$(mktemp -d /tmp/gpufleet-cluster-stage.XXXXXX)
own_log=.cache/cluster-own-nodes.log
mkdir -p .cache

deselect=()
for module in "${OWN_NODES_MODULES[@]}"; do
    [ -f "$module" ] || { echo "cluster-streams.sh: $module is not there: update OWN_NODES_MODULES" >&2; exit 2; }
    deselect+=(--ignore="$module")
done

started=$(date +%s)
(GPUFLEET_TESTBED_NO_SESSION_CLUSTER=1 "$python" -m pytest -p no:cacheprovider --durations=15 \
    --basetemp="$base/own-nodes" "$@" \
    "${OWN_NODES_MODULES[@]}"; rc=$?; echo "own-nodes modules: exit $rc after $(( $(date +%s) - started )) s"
 if [ "$integration" = 1 ]; then
     echo; echo "=== tests/integration, in this stream after the own-nodes modules ==="
     "$python" -m pytest -p no:cacheprovider --basetemp="$base/integration" "$@" tests/integration
     integration_rc=$?
     echo "integration tests: exit $integration_rc after $(( $(date +%s) - started )) s"
     [ "$rc" -eq 0 ] && rc=$integration_rc
 fi
 echo "own-nodes stream: $(( $(date +%s) - started )) s"; exit $rc) \
    > "$own_log" 2>&1 &
own_pid=$!

GPUFLEET_TESTBED_KEEP=$kept "$python" -m pytest --durations=25 --basetemp="$base/session" "$@" \
    "${deselect[@]}" tests/cluster
session_rc=$?
session_s=$(( $(date +%s) - started ))

wait "$own_pid"
own_rc=$?
echo
echo "=== the own-nodes stream (${OWN_NODES_MODULES[*]}$([ "$integration" = 1 ] && echo ", then tests/integration")), run beside the above: $own_log ==="
cat "$own_log"
echo
echo "cluster stage: session cluster's stream exit $session_rc in $session_s s, own-nodes stream exit $own_rc" \
    "(its time on its log's last line), both done after $(( $(date +%s) - started )) s"
rm -rf "$base"
[ "$session_rc" -eq 0 ] && [ "$own_rc" -eq 0 ]
