#!/usr/bin/env bash
# The main job (`make demo [MODEL=DIR] [PORT=8000]`): serve a model with the OpenAI-compatible API.
#
# Without MODEL, writes the `demo` preset checkpoint to ./models/demo once (DeepSeek-V4 layout,
# RANDOM weights, real DeepSeek tokenizer: the API works end to end, the text is gibberish) and
# serves it. With MODEL=DIR, serves that Hugging Face directory (a real checkpoint).
# Runs `deepinfer serve` in the foreground; Ctrl-C shuts it down gracefully.
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL="${1:-}"
PORT="${2:-8000}"
BIN="${DEEPINFER_BIN:-./build/bin/deepinfer}"
# A setting of this script, not of the server (which warns about unknown DEEPINFER_* variables).
unset DEEPINFER_BIN

if [[ -z "$MODEL" ]]; then
  MODEL=./models/demo
  if [[ ! -f "$MODEL/config.json" || ! -f "$MODEL/tokenizer.json" ]]; then
    echo "demo: writing the demo checkpoint (random weights) to $MODEL ..."
    rm -rf "$MODEL.tmp"
    "$BIN" make-test-model --arch deepseek_v4 --preset demo --out "$MODEL.tmp"
    rm -rf "$MODEL"
    mv "$MODEL.tmp" "$MODEL"
  fi
  echo "demo: NOTE the demo model has random weights; its replies are meaningless text."
fi
NAME="$(basename "$MODEL")"

cat <<MSG

Once the server says "listening", try (from another terminal):

  curl -s http://127.0.0.1:${PORT}/v1/chat/completions -H 'Content-Type: application/json' \\
    -d '{"model": "${NAME}", "messages": [{"role": "user", "content": "Hello!"}], "max_tokens": 32,
         "thinking": {"type": "disabled"}}'

(Thinking is on by default for DeepSeek models: the reply then starts as reasoning_content and
only the text after </think> is content; the random-weight demo model rarely closes </think>.)

MSG
exec "$BIN" serve --model "$MODEL" --port "$PORT" --served-model-name "$NAME"
