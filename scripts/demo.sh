#!/usr/bin/env bash
# The main job (make demo). Until `deepinfer serve` exists, prints the version and CPU features.
set -euo pipefail
cd "$(dirname "$0")/.."
./build/bin/deepinfer version
