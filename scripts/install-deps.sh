#!/usr/bin/env bash
# Installs every Debian package MetaOp needs to build, test and export test models.
# Idempotent: only packages that are missing are installed. Needs root (or sudo) when
# something is missing.
set -euo pipefail

PACKAGES=(
  g++ make cmake pkg-config
  libprotobuf-dev protobuf-compiler
  libonnx-dev libonnx-testdata
  libtorch-dev
  libdnnl-dev ocl-icd-opencl-dev opencl-c-headers
  libopencv-dev
  libeigen3-dev libopenblas-dev
  nlohmann-json3-dev libcli11-dev libfmt-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  python3 python3-numpy python3-torch python3-torchvision python3-onnx
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#PACKAGES[@]} packages present"
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
