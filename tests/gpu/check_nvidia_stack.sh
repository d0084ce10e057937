#!/usr/bin/env bash
# Check gpufleet's NVIDIA roles and verify.yml for real on this machine, which must already have an NVIDIA GPU
# and driver. Not part of `make test` (CI has no GPU); run it by hand where a GPU is available.
#
#   tests/gpu/check_nvidia_stack.sh [--nccl-tests-archive PATH] [--mirror URL] [-- extra ansible-playbook args]
#
# - The existing driver is detected (branch from nvidia-smi) and kept: the driver role finds it installed and
#   loaded, so it changes nothing and never reboots (nvidia_driver_reboot=false as a second guard).
# - CUDA and NCCL come from NVIDIA's repository, or from --mirror (a local mirror, for machines without internet);
#   without either, pass -- --skip-tags cuda_toolkit,nccl to keep what is installed.
# - nccl-tests is built from --nccl-tests-archive when given (no internet needed), else downloaded.
# - verify.yml then prints the version table and runs all_reduce_perf on the local GPUs through mpirun,
#   writing logs/verify/all_reduce_perf.json and busbw.png.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
archive="" mirror=""
while [ $# -gt 0 ]; do
    case "$1" in
        --nccl-tests-archive) archive=$(realpath "$2"); shift 2 ;;
        --mirror) mirror=$2; shift 2 ;;
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
      ansible_python_interpreter: "{{ ansible_playbook_python }}"
      gpufleet_cluster_address: 127.0.0.1
      gpufleet_gpus: $gpus
      nvidia_driver_branch: ${driver%%.*}
      nvidia_driver_reboot: false
      ${mirror:+gpufleet_nvidia_mirror: $mirror}
      ${archive:+nccl_tests_archive: $archive}
INVENTORY
echo "gpufleet: $gpus GPU(s), driver $driver; inventory $work/hosts.yml"
cd "$repo"
ansible-playbook -i "$work/hosts.yml" playbooks/provision.yml \
    --tags nvidia_driver,cuda_toolkit,nccl,nccl_env,mpi,nccl_tests "$@"
ansible-playbook -i "$work/hosts.yml" playbooks/verify.yml "$@"
