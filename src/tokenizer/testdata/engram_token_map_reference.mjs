// Independent reference for the DeepSeek-V4.1 Engram token map (tokenizer/engram_token_map.h,
// spec deepseek-v41.md §4.2): decodes every id alone with @lenml/tokenizers (a JavaScript port of
// HF tokenizers) and normalises with JavaScript's own Unicode tables (String.prototype.normalize,
// \p{M}, toLowerCase per code point, \s-free White_Space trim).
//
// Usage: node engram_token_map_reference.mjs <tokenizer_dir> <output.json>
//   output.json: {"map": [compressed id per token id], "num_keys": N}
import fs from "node:fs";
import path from "node:path";
import { TokenizerLoader } from "@lenml/tokenizers";

const [dir, outputPath] = process.argv.slice(2);
const tokenizerJSON = JSON.parse(fs.readFileSync(path.join(dir, "tokenizer.json"), "utf8"));
const tokenizer = TokenizerLoader.fromPreTrained({ tokenizerJSON, tokenizerConfig: {} });

// id -> raw vocabulary string (base vocab, then added tokens).
const idToToken = new Map();
for (const [tok, id] of Object.entries(tokenizerJSON.model.vocab)) idToToken.set(id, tok);
for (const t of tokenizerJSON.added_tokens ?? []) idToToken.set(t.id, t.content);
let n = 0;
for (const id of idToToken.keys()) n = Math.max(n, id + 1);

// Unicode White_Space property (Rust str::trim).
const WS = "[\\u0009-\\u000D\\u0020\\u0085\\u00A0\\u1680\\u2000-\\u200A\\u2028\\u2029\\u202F\\u205F\\u3000]";
const trimRe = new RegExp(`^${WS}+|${WS}+$`, "gu");

function normalize(text) {
  let s = text.normalize("NFKC").normalize("NFD");
  s = s.replace(/\p{M}/gu, "");
  s = Array.from(s, (c) => c.toLowerCase()).join("");
  s = s.replace(/[ \t\r\n]+/g, " ");
  if (s === " ") s = "\uE000";
  s = s.replace(trimRe, "");
  return s.replaceAll("\uE000", " ");
}

const keys = new Map();
const map = new Array(n);
for (let id = 0; id < n; ++id) {
  const text = idToToken.has(id)
    ? tokenizer.decode([id], { skip_special_tokens: false, clean_up_tokenization_spaces: false })
    : "";
  let key;
  if (text.includes("\uFFFD")) {
    key = idToToken.get(id);
  } else {
    const norm = normalize(text);
    key = norm.length > 0 ? norm : text;
  }
  if (!keys.has(key)) keys.set(key, keys.size);
  map[id] = keys.get(key);
}
fs.writeFileSync(outputPath, JSON.stringify({ map, num_keys: keys.size }));
