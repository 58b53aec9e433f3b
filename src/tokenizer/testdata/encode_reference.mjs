// Independent reference encoder for the tokenizer tests and benchmark: encodes texts with the
// npm package @lenml/tokenizers (a JavaScript port of Hugging Face tokenizers / transformers.js).
//
// Usage: node encode_reference.mjs <tokenizer_dir> <input.json> <output.jsonl> [--bench N]
//   tokenizer_dir: folder with tokenizer.json (+ optional tokenizer_config.json)
//   input.json:    a JSON array of strings
//   output.jsonl:  one JSON array of ids per input string (no BOS/EOS added)
//   --no-added:    drop the added-token list first, i.e. encode as plain text (how the
//                  content encoder must treat special-token spellings, protocol.md §4.4)
//   --bench N:     also encode all inputs N times and print "lenml_mb_per_s <wall> <cpu>" on
//                  stdout (MB per wall-clock second and per CPU-second)
// Node modules are resolved from this file's repository (node_modules at the repo root).
import fs from "node:fs";
import path from "node:path";
import { TokenizerLoader } from "@lenml/tokenizers";

const [dir, inputPath, outputPath, ...rest] = process.argv.slice(2);
if (!dir || !inputPath || !outputPath) {
  console.error("usage: node encode_reference.mjs <tokenizer_dir> <input.json> <output.jsonl>");
  process.exit(2);
}
const tokenizerJSON = JSON.parse(fs.readFileSync(path.join(dir, "tokenizer.json"), "utf8"));
const configPath = path.join(dir, "tokenizer_config.json");
const tokenizerConfig = fs.existsSync(configPath)
  ? JSON.parse(fs.readFileSync(configPath, "utf8"))
  : {};
if (rest.includes("--no-added")) tokenizerJSON.added_tokens = [];
const tokenizer = TokenizerLoader.fromPreTrained({ tokenizerJSON, tokenizerConfig });
const texts = JSON.parse(fs.readFileSync(inputPath, "utf8"));

const lines = [];
for (const text of texts) {
  lines.push(JSON.stringify(tokenizer.encode(text, { add_special_tokens: false })));
}
fs.writeFileSync(outputPath, lines.join("\n") + "\n");

const benchIndex = rest.indexOf("--bench");
if (benchIndex >= 0) {
  const reps = Number(rest[benchIndex + 1] ?? "1");
  const bytes = texts.reduce((n, t) => n + Buffer.byteLength(t, "utf8"), 0);
  // The BPE cache is warm from the pass above, as ours is in the C++ benchmark iterations.
  const start = process.hrtime.bigint();
  const cpuStart = process.cpuUsage();
  for (let r = 0; r < reps; ++r) {
    for (const text of texts) tokenizer.encode(text, { add_special_tokens: false });
  }
  const seconds = Number(process.hrtime.bigint() - start) / 1e9;
  const cpu = process.cpuUsage(cpuStart);
  const cpuSeconds = (cpu.user + cpu.system) / 1e6;
  // Wall-clock MB/s, then MB per CPU-second (robust on a shared, loaded machine).
  console.log(`lenml_mb_per_s ${(bytes * reps) / seconds / 1e6} ${(bytes * reps) / cpuSeconds / 1e6}`);
}
