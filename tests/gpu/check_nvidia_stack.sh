#!/usr/bin/env bash
# Check gpufleet's NVIDIA roles and verify.yml for real on this machine, which must already have an NVIDIA GPU
# and driver. Not part of `make test` (CI has no GPU); run it by hand where a GPU is available.
#
#   tests/gpu/check_nvidia_stack.sh [--nccl-tests-archive PATH] [--mirror URL] [--keep-driver] [--offline] [--dcgm]
#                                   [-- extra ansible-playbook args]
#
# - The existing driver is detected (branch from nvidia-smi) and kept: the driver role finds it installed and
#   loaded, so it changes nothing and never reboots (nvidia_driver_reboot=false as a second guard).
#   --keep-driver: the driver did not come from packages (a .run install, or the machine's image: the role
#   refuses such a driver otherwise) and the machine may be a VM made from a container image; keep it.
# - CUDA and NCCL come from NVIDIA's repository, or from --mirror (a local mirror, for machines without internet).
#   --offline: keep the CUDA, NCCL, Open MPI and build tools that are installed (no package manager is asked).
# - nccl-tests is built from --nccl-tests-archive when given (no internet needed), else downloaded.
# - --dcgm: the dcgm role too (DCGM 4 from NVIDIA's repository, nvidia-dcgm running).
# - verify.yml then prints the version table, DCGM's level-1 diagnostic per GPU where dcgmi is installed (by --dcgm
#   or before), and runs all_reduce_perf on the local GPUs through mpirun, writing logs/verify/all_reduce_perf.json
#   and busbw.png. Where dcgmi is installed, what `dcgmi diag -r 1 -j` printed is kept in
#   logs/gpu-check/dcgm-diag-r1.json (a fixture for tests/fixtures/dcgm).
# - train.yml with NCCL, then health.yml (the node passes between jobs) and the slurm role's health check program
#   run once as slurmd would run it (it passes; no Slurm here, so nothing is drained).
# Node-side modules run with /usr/bin/python3 (GPUFLEET_CHECK_PYTHON); training runs with python3 from PATH.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
archive="" mirror="" keep=false offline=false dcgm=false
while [ $# -gt 0 ]; do
    case "$1" in
        --nccl-tests-archive) archive=$(realpath "$2"); shift 2 ;;
        --mirror) mirror=$2; shift 2 ;;
        --keep-driver) keep=true; shift ;;
        --offline) offline=true; shift ;;
        --dcgm) dcgm=true; shift ;;
        --) shift; break ;;
        *) echo "unknown option $1" >&2; exit 2 ;;
    esac
done
command -v nvidia-smi >/dev/null || { echo "no nvidia-smi: this check needs a machine with an NVIDIA driver" >&2; exit 2; }
driver=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -n 1)
gpus=$(nvidia-smi -L | grep -c '^GPU ')
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat > "$work/hosts.yml" <<INVENTORY
gpu_nodes:
  hosts:
    localgpu:
      ansible_connection: local
      ansible_python_interpreter: ${GPUFLEET_CHECK_PYTHON:-/usr/bin/python3}
      ansible_become: false
      gpufleet_python: $(command -v python3)
      gpufleet_cluster_address: 127.0.0.1
      gpufleet_gpus: $gpus
      nvidia_driver_branch: ${driver%%.*}
      nvidia_driver_reboot: false
      nvidia_driver_keep_unpackaged: $keep
      nvidia_driver_allow_container: $keep
      ${mirror:+gpufleet_nvidia_mirror: $mirror}
      ${archive:+nccl_tests_archive: $archive}
INVENTORY
echo "gpufleet: $gpus GPU(s), driver $driver; inventory $work/hosts.yml"
cd "$repo"
tags=nvidia_driver,nvidia_fabricmanager,nvidia_peermem,cuda_toolkit,nccl,nccl_env,mpi,nccl_tests
skip=()
if $offline; then
    tags=nvidia_driver,nvidia_fabricmanager,nvidia_peermem,nccl_env,mpi,nccl_tests
    skip=(--skip-tags mpi_install,nccl_tests_install)
fi
if $dcgm; then
    tags=$tags,dcgm
    set -- -e dcgm_enabled=true "$@"
fi
ansible-playbook -i "$work/hosts.yml" playbooks/provision.yml -e allow_local=true --tags "$tags" "${skip[@]}" "$@"
echo "gpufleet: provision.yml again: nothing may change"
ansible-playbook -i "$work/hosts.yml" playbooks/provision.yml -e allow_local=true --tags "$tags" "${skip[@]}" "$@" | tee "$work/again.log"
grep -qE 'localgpu +: ok=[0-9]+ +changed=0 ' "$work/again.log" || { echo "gpufleet: the second run changed something" >&2; exit 1; }
if command -v dcgmi >/dev/null; then
    mkdir -p logs/gpu-check
    dcgmi diag -r 1 -j > logs/gpu-check/dcgm-diag-r1.json || echo "gpufleet: dcgmi diag -r 1 exited $?"
fi
ansible-playbook -i "$work/hosts.yml" playbooks/verify.yml -e allow_local=true "$@"
ansible-playbook -i "$work/hosts.yml" playbooks/train.yml -e script=examples/train.py -e "script_args='--epochs 3'" \
    -e job=gpu-check -e force=true "$@"
grep -q 'backend nccl' logs/gpu-check/localgpu.log || { echo "gpufleet: training did not use NCCL on the GPU" >&2; exit 1; }
# examples/train.py names its GPU to the last barrier: torch 2.11 warns otherwise (seen on an H200, 2026-11-27).
if grep -q 'using the device under current context' logs/gpu-check/localgpu.log; then
    echo "gpufleet: a rank's barrier did not name its GPU (examples/train.py)" >&2; exit 1
fi
# Health between jobs: with the job gone, health.yml passes this node by the launch's own gate, its table naming
# the GPUs and driver that nvidia-smi gave.
ansible-playbook -i "$work/hosts.yml" playbooks/health.yml -e allow_local=true "$@" | tee "$work/health.log"
grep -qE "localgpu +passed +$gpus +$driver " "$work/health.log" || { echo "gpufleet: health.yml did not pass this node" >&2; exit 1; }
# Slurm's HealthCheckProgram as the slurm role writes it (one file, the standard library alone), run by the system
# Python with nothing on PYTHONPATH and no Slurm here: it reads this node's GPUs and passes; nothing to drain.
python3 -c "import sys; sys.path.insert(0, 'collections')
from ansible_collections.gpufleet.cluster.plugins.filter.slurm import slurm_health_check
print(slurm_health_check('/usr/bin/python3'), end='')" > "$work/health-check"
printf '{"slurm_node": "localgpu", "gpus": %s, "state_dir": "%s", "log": "%s"}\n' "$gpus" "$work/state" \
    "logs/gpu-check/health-check.log" > "$work/health-check.json"
env -u PYTHONPATH /usr/bin/python3 "$work/health-check" --config "$work/health-check.json"
grep -q "localgpu: passed$" logs/gpu-check/health-check.log || { echo "gpufleet: the Slurm health check did not pass" >&2; exit 1; }
echo "gpufleet: NVIDIA stack check passed on $gpus GPU(s), driver $driver"
