#!/usr/bin/env bash
# Clang's thread-safety analysis over the code that shares state between threads (STYLE.md habit
# 4, ARCHITECTURE.md §8): src/api, src/http, src/engine. Every field an absl::Mutex protects is
# ABSL_GUARDED_BY it; touching one without the lock is an error here (GCC ignores the
# annotations). Syntax-only: no objects are written. Called by .ci/run; usable on its own.
#   scripts/check-thread-safety.sh [FILE.cc ...]   (default: every non-test .cc of those dirs)
set -euo pipefail
cd "$(dirname "$0")/.."
CXX=${CLANGXX:-clang++}
if ! command -v "$CXX" >/dev/null 2>&1; then
  echo "check-thread-safety: $CXX not found (scripts/install-deps.sh installs Debian's clang)" >&2
  exit 1
fi
# Canary: an unguarded access must be reported, or the analysis is not running at all.
canary='#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
struct C { absl::Mutex mu; int n ABSL_GUARDED_BY(mu) = 0; void Bump() { ++n; } };'
if echo "$canary" | "$CXX" -std=c++20 -Isrc -x c++ -fsyntax-only -Wthread-safety \
     -Werror=thread-safety - 2>/dev/null; then
  echo "check-thread-safety: the canary's missing lock was not reported" >&2
  exit 1
fi
if [ $# -gt 0 ]; then
  files=("$@")
else
  mapfile -t files < <(ls src/api/*.cc src/http/*.cc src/engine/*.cc | grep -v '_test\.cc$' |
                         grep -v '_bench\.cc$')
fi
printf '%s\n' "${files[@]}" |
  xargs -P "$(nproc)" -I{} "$CXX" -std=c++20 -Isrc -march=x86-64-v3 -fsyntax-only \
    -Wthread-safety -Werror=thread-safety -Wno-unknown-warning-option {}
echo "check-thread-safety: ${#files[@]} files clean"
