#!/usr/bin/env bash
# Installs everything reshard's build, tests, benchmarks and examples need, from Debian 12's
# packages. Idempotent: does nothing when every package is already installed.
set -euo pipefail

packages=(
  build-essential ca-certificates git cmake
  g++-12 clang-14 libclang-rt-14-dev
  libboost-dev
  libxtensor-dev libxsimd-dev
  librapidcheck-dev libgtest-dev libbenchmark-dev
  nlohmann-json3-dev libcli11-dev
  pkg-config libre2-dev
  libprotobuf-dev protobuf-compiler
  libopenmpi-dev openmpi-bin
  python3 python3-protobuf python3-numpy
  pybind11-dev python3-dev python3-pytest python3-hypothesis python3-tqdm
  python3-torch  # real PyTorch: writes the DCP checkpoints of verify/data/dcp and test_dcp_torch.py
  strace util-linux
  librsvg2-bin
)

missing=()
for p in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)
  if [[ "$status" != "installed" ]]; then
    missing+=("$p")
  fi
done

if (( ${#missing[@]} == 0 )); then
  echo "install-deps: all ${#packages[@]} packages are installed"
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
sudo=()
if (( EUID != 0 )); then
  sudo=(sudo)
fi
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update
"${sudo[@]}" apt-get install -y --no-install-recommends "${packages[@]}"
