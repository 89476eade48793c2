#!/usr/bin/env bash
# Installs the Debian packages lazyc needs, and nothing when all are there.
# Runs as root (CI does); elsewhere it prints what to install and fails.
set -euo pipefail

PACKAGES=(
  build-essential gcc cmake pkg-config   # toolchain
  ninja-build                            # pip install ./python's CMake build (else pip fetches Ninja from PyPI)
  libdnnl-dev zlib1g-dev                 # oneDNN 2.x kernels, gzipped data sets
  python3-torch python3-torchvision      # PyTorch reference for parity tests
  python3-venv                           # virtual environments for the PyTorch bridge (scripts/pyenv.sh)
  libopenblas0-pthread                   # PyTorch's BLAS: without it torch runs the reference BLAS
  valgrind clang libclang-rt-14-dev      # leak checks, libFuzzer harnesses (make check-all)
  libomp-dev                             # clang's OpenMP runtime, for the fuzz harnesses
  dataset-fashion-mnist                  # real data under /usr/share/datasets
  libopenmpi-dev openmpi-bin             # data-parallel training over MPI (mpirun)
)

installed() {
  dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q '^install ok installed$'
}

missing=()
for p in "${PACKAGES[@]}"; do
  installed "$p" || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

echo "setup: installing ${missing[*]}"
if [ "$(id -u)" -ne 0 ]; then
  echo "setup: not root; run: sudo apt-get install ${missing[*]}" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
# The package lists are refreshed only when something must be installed, so a
# ready machine never touches the network.
apt-get update -q
apt-get install -y -q --no-install-recommends "${missing[@]}"
