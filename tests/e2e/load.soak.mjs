// Load test (ctest label `soak`): N concurrent streaming clients for D seconds on loopback, each
// in a bounded loop of requests. Asserts zero errors and prints throughput and client-side
// inter-token latency percentiles (the numbers recorded in docs/performance.md).
//   DEEPINFER_LOAD_CLIENTS (64)  DEEPINFER_LOAD_SECONDS (60)  DEEPINFER_LOAD_MODEL (stories260K dir)
import { test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { STORIES, haveStories, metric, startServer } from './helpers.mjs';

const clients = Number(process.env.DEEPINFER_LOAD_CLIENTS ?? 64);
const seconds = Number(process.env.DEEPINFER_LOAD_SECONDS ?? 60);
const modelDir = process.env.DEEPINFER_LOAD_MODEL ?? STORIES;
const maxTokens = Number(process.env.DEEPINFER_LOAD_MAX_TOKENS ?? 64);

function percentile(sorted, p) {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];
}

test(`load: ${clients} streaming clients for ${seconds} s`, { skip: haveStories() ? false : 'no model', timeout: (seconds + 120) * 1000 }, async () => {
  const server = await startServer(modelDir, ['--served-model-name', 'm', '--max-num-seqs', String(Math.max(64, clients))]);
  try {
    const client = new OpenAI({ baseURL: server.baseURL, apiKey: 'x', maxRetries: 0, timeout: 120000 });
    const itl = [];    // ms between consecutive chunks carrying text
    const ttft = [];   // ms from request to first text chunk
    let requests = 0;
    let tokens = 0;
    const errors = [];
    const deadline = Date.now() + seconds * 1000;
    const worker = async (w) => {
      for (let i = 0; Date.now() < deadline && i < 100000; i++) {
        const t0 = performance.now();
        try {
          const stream = await client.completions.create({
            model: 'm', prompt: 'Once upon a time', max_tokens: maxTokens, temperature: 1, seed: w * 100000 + i,
            stream: true, stream_options: { include_usage: true }, ignore_eos: true,
          });
          let last = null;
          for await (const chunk of stream) {
            if (chunk.usage) { tokens += chunk.usage.completion_tokens; continue; }
            const now = performance.now();
            if (last === null) ttft.push(now - t0); else itl.push(now - last);
            last = now;
          }
          requests++;
        } catch (e) {
          errors.push(String(e));
        }
      }
    };
    const start = performance.now();
    await Promise.all(Array.from({ length: clients }, (_, w) => worker(w)));
    const elapsed = (performance.now() - start) / 1000;
    itl.sort((a, b) => a - b);
    ttft.sort((a, b) => a - b);
    const report = {
      clients, seconds: Number(elapsed.toFixed(1)), requests, errors: errors.length,
      output_tokens: tokens, tokens_per_s: Number((tokens / elapsed).toFixed(1)),
      itl_ms: { p50: percentile(itl, 50).toFixed(2), p90: percentile(itl, 90).toFixed(2), p99: percentile(itl, 99).toFixed(2) },
      ttft_ms: { p50: percentile(ttft, 50).toFixed(1), p99: percentile(ttft, 99).toFixed(1) },
      kv_blocks_used_after: await metric(server.url, 'deepinfer_kv_blocks_used'),
    };
    console.log(`LOAD REPORT ${JSON.stringify(report)}`);
    assert.deepEqual(errors.slice(0, 5), []);
    assert.ok(requests > 0);
  } finally {
    assert.equal((await server.stop()).code, 0);
  }
});
