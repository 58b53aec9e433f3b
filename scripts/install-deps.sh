#!/usr/bin/env bash
# Installs every build and test dependency of deepinfer. The only place that installs anything.
# Idempotent: when everything is present it does nothing (no apt-get, no npm).
#   Debian packages (apt-get), one reason each:
#     cmake ninja-build g++    build
#     libabsl-dev              Status/StatusOr, strings, containers (ARCHITECTURE.md §8)
#     libboost-dev             Boost.Beast/Asio HTTP server (src/http)
#     nlohmann-json3-dev       JSON (protocol codecs, config.json, safetensors headers)
#     libpcre2-dev             Unicode regex for tokenizer pre-tokenizers
#     libicu-dev               NFKC/NFD/lowercase of the DeepSeek-V4.1 Engram token map (src/tokenizer)
#     libxxhash-dev            XXH3 block hashing (src/kv)
#     libgtest-dev libgmock-dev  unit tests
#     libbenchmark-dev         microbenchmarks (make bench)
#     pkg-config               locating pcre2/xxhash
#     gnuplot-nox              PNG plots of the simulator experiments (make sim; tests never need it)
#     librados-dev             the RADOS L2 KV store (src/kvstore/rados_store.cc)
#     ceph-mon ceph-osd ceph-mgr ceph-common  the throwaway test cluster (scripts/ceph-test-cluster.sh)
#     clang                    -Wthread-safety analysis of annotated locking (scripts/check-thread-safety.sh, .ci/run)
#     clang-14 libclang-rt-14-dev  libFuzzer + ASan/UBSan runtime (scripts/fuzz-protocol.sh)
#     python3-dev pybind11-dev     the `deepinfer` Python package (src/python, python/; docs/python.md)
#     python3-pytest python3-jsonschema  its test suite (python/tests, inside make test)
#   JavaScript test clients (npm ci from the checked-in package-lock.json): official openai and
#   @anthropic-ai/sdk clients, @lenml/tokenizers (independent tokenizer), ajv (schema validator).
set -euo pipefail
cd "$(dirname "$0")/.."

DEBIAN_PACKAGES=(cmake ninja-build g++ pkg-config gnuplot-nox libabsl-dev libboost-dev nlohmann-json3-dev
  libpcre2-dev libicu-dev libxxhash-dev libgtest-dev libgmock-dev libbenchmark-dev clang
  python3-dev pybind11-dev python3-pytest python3-jsonschema
  librados-dev ceph-mon ceph-osd ceph-mgr ceph-common)
# Only for scripts/fuzz-protocol.sh (libFuzzer + ASan/UBSan runtime): `install-deps.sh --fuzz`.
if [ "${1:-}" = "--fuzz" ]; then DEBIAN_PACKAGES+=(clang-14 libclang-rt-14-dev); fi

missing=()
for p in "${DEBIAN_PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
# Node.js and npm: use the machine's if present (Debian's npm conflicts with a preinstalled
# Node.js); otherwise take Debian's.
if ! command -v node >/dev/null 2>&1; then missing+=(nodejs); fi
if ! command -v npm >/dev/null 2>&1; then missing+=(npm); fi

if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}"
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# npm ci only when node_modules is missing or older than the lockfile.
if [ ! -f node_modules/.package-lock.json ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  echo "install-deps: npm ci"
  npm ci --no-audit --no-fund --loglevel=error
fi
