#!/usr/bin/env bash
# Compile a real nccl-tests release the way the nccl_tests role does (MPI=1, MPI_HOME, CUDA_HOME, NCCL_HOME and
# the NVCC_GENCODE the role derives), against a real CUDA toolkit, NCCL from PyPI's wheel and Debian's Open MPI.
# No GPU is needed to compile. Not part of `make test`: it needs the release's source, which CI cannot download.
#
#   scripts/compile-nccl-tests.sh SOURCE_DIR [CUDA_HOME]
#
# SOURCE_DIR holds the release (e.g. `git -C nccl-tests archive v2.19.6 | tar -x -C SOURCE_DIR`); CUDA_HOME is
# /usr/local/cuda by default. NCCL comes from nvidia-nccl-cu<CUDA major> (NCCL_WHEEL_VERSION, default below),
# installed into a scratch folder; its wheel ships only libnccl.so.2, so libnccl.so is linked beside it for -lnccl.
# Prints the make line, the binaries built and what each links against; exits non-zero when the build fails.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
src=$(cd "${1:?usage: $0 SOURCE_DIR [CUDA_HOME]}" && pwd)
cuda_home=${2:-/usr/local/cuda}
nccl_wheel_version=${NCCL_WHEEL_VERSION:-2.28.9}
python=${PYTHON:-python3}

cuda=$("$cuda_home/bin/nvcc" --version | sed -n 's/.*release \([0-9]*\.[0-9]*\).*/\1/p')
major=${cuda%%.*}
echo "compile-nccl-tests: CUDA $cuda at $cuda_home; source $src"

"$repo/scripts/install-system-packages.sh" libopenmpi-dev make g++
mpi_home=/usr/lib/$(uname -m)-linux-gnu/openmpi

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
"$python" -m pip install --quiet --no-deps --target "$scratch/site" "nvidia-nccl-cu${major}==${nccl_wheel_version}"
nccl_home=$(ls -d "$scratch"/site/nvidia/nccl* | head -n 1)
[ -e "$nccl_home/lib/libnccl.so" ] || ln -s libnccl.so.2 "$nccl_home/lib/libnccl.so"

# The role's derivation (plugins/plugin_utils/_provision/nvidia_hardware.py): no GPU here, so the toolkit's defaults.
gencode=$(PYTHONPATH="$repo/collections" "$python" -c \
  'import sys; from ansible_collections.gpufleet.cluster.plugins.plugin_utils._provision.nvidia_hardware import nvcc_gencode; print(nvcc_gencode(sys.argv[1], []))' \
  "$cuda")

args=(MPI=1 "MPI_HOME=$mpi_home" "CUDA_HOME=$cuda_home" "NCCL_HOME=$nccl_home" "NVCC_GENCODE=$gencode")
echo "compile-nccl-tests: make -C $src -j$(nproc) ${args[*]}"
started=$(date +%s)
make -C "$src" -j"$(nproc)" "${args[@]}" > "$scratch/make.log" 2>&1 || { tail -n 40 "$scratch/make.log"; exit 1; }
echo "compile-nccl-tests: built in $(( $(date +%s) - started )) s"
for binary in "$src"/build/*_perf; do
    echo "  $(basename "$binary"): $(LD_LIBRARY_PATH="$nccl_home/lib" ldd "$binary" | grep -oE 'lib(nccl|mpi|cudart)[^ ]*' | sort -u | tr '\n' ' ')"
done
