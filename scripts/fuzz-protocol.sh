#!/usr/bin/env bash
# Builds and runs the protocol-layer libFuzzer target (src/protocol/fuzz/protocol_fuzzer.cc) with
# clang + ASan + UBSan. Not part of the default (gcc) build. Needs clang-14 and libclang-rt-14-dev.
#
#   scripts/fuzz-protocol.sh [SECONDS]       # default 600; corpus: src/protocol/fuzz/corpus
#   FUZZ_BUILD_ONLY=1 scripts/fuzz-protocol.sh
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
OUT="${FUZZ_OUT:-$ROOT/build-fuzz-protocol}"
SECONDS_TO_RUN="${1:-600}"
CXX="${CXX_FUZZ:-clang++-14}"
bash "$ROOT/scripts/install-deps.sh" --fuzz
mkdir -p "$OUT"
SRCS=(
  "$ROOT/src/protocol/fuzz/protocol_fuzzer.cc"
  "$ROOT/src/protocol/conversation.cc"
  "$ROOT/src/protocol/output_parser.cc"
  "$ROOT/src/protocol/prompt_encoder.cc"
  "$ROOT/src/protocol/py_json.cc"
)
# shellcheck disable=SC2046
[[ "${FUZZ_SKIP_BUILD:-0}" == 1 && -x "$OUT/protocol_fuzzer" ]] || "$CXX" -std=c++20 -O1 -g -fno-omit-frame-pointer \
  -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  -I"$ROOT/src" "${SRCS[@]}" -o "$OUT/protocol_fuzzer" \
  $(pkg-config --libs absl_status absl_statusor absl_strings absl_flat_hash_map absl_flat_hash_set absl_cord)
echo "built $OUT/protocol_fuzzer"
[[ "${FUZZ_BUILD_ONLY:-0}" == 1 ]] && exit 0
CORPUS="$ROOT/src/protocol/fuzz/corpus"
mkdir -p "$CORPUS" "$OUT/artifacts" "$OUT/work_corpus"
# New inputs go to a scratch corpus; the kept corpus is updated with `-merge=1` by hand.
"$OUT/protocol_fuzzer" "$OUT/work_corpus" "$CORPUS" -max_total_time="$SECONDS_TO_RUN" \
  -max_len=4096 -timeout=10 -rss_limit_mb=2048 -artifact_prefix="$OUT/artifacts/" \
  -print_final_stats=1
