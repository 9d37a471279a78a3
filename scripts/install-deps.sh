#!/usr/bin/env bash
# Installs every Debian package MetaOp needs to build, test and export test models, then
# ONNX Runtime 1.30 from npm (onnxruntime-node, onnxruntime-web) into third_party/node
# (git-ignored). Idempotent: only what is missing is installed. Needs root (or sudo) when a
# Debian package is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(
  g++ make cmake pkg-config
  clang libclang-rt-dev clang-tidy-16 clang-format-16
  libprotobuf-dev protobuf-compiler
  libonnx-dev libonnx-testdata
  libtorch-dev
  libdnnl-dev ocl-icd-opencl-dev opencl-c-headers
  libopencv-dev
  libeigen3-dev libopenblas-dev libxxhash-dev
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

# Node.js and npm run ONNX Runtime's JavaScript packages; a Node.js installed otherwise (with
# its own npm) is used as it is.
if ! command -v node >/dev/null 2>&1; then missing+=(nodejs); fi
if ! command -v npm >/dev/null 2>&1; then missing+=(npm); fi

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#PACKAGES[@]} Debian packages present"
else
  echo "install-deps: installing ${missing[*]}"
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# ONNX Runtime: the versions pinned by third_party/node/package-lock.json. --ignore-scripts:
# onnxruntime-node's install script downloads GPU libraries from elsewhere; its CPU library
# ships in the package.
ORT_DIR=third_party/node
want=$(sed -n 's/.*"onnxruntime-node": "\(.*\)".*/\1/p' "$ORT_DIR/package.json")
have=$(sed -n 's/.*"version": "\(.*\)".*/\1/p' "$ORT_DIR/node_modules/onnxruntime-node/package.json" 2>/dev/null | head -1 || true)
if [ "$have" = "$want" ] && [ -f "$ORT_DIR/node_modules/onnxruntime-web/package.json" ]; then
  echo "install-deps: onnxruntime-node $have present"
else
  echo "install-deps: npm install onnxruntime-node@$want onnxruntime-web@$want into $ORT_DIR"
  (cd "$ORT_DIR" && npm ci --ignore-scripts --no-audit --no-fund)
fi
