// KV tiers under load (ctest label `soak`, `make soak`; issue "KV cache system, part 3"):
// 32 concurrent clients of a multi-turn chat workload for 60 s against one `deepinfer serve`
// with L1 (host shared memory) and L2 (one `deepinfer kvstore` node), all on loopback, bounded
// in time. Every response is checked against a second, uncached server (--no-prefix-caching) on
// the same prompt: greedy, so the texts must be equal; a single difference fails the test.
// Prints hit rate (cached / prompt tokens, and per tier from /metrics when the server exports
// it) and client-side TTFT p50 / p90 (the numbers recorded in docs/performance.md).
//
// Model: stories260K (Llama, full attention). Its hits are exact — a hit reuses the very block
// KV the uncached forward computes, with no sliding-window replay or approximate blocks — so
// "equal to the uncached server" is the right check for every request, and it is small enough
// that 32 clients + a reference server run on 2 cores. Its context is 512 tokens, so prompts are
// completions with growing multi-turn text: a shared ~140-token preamble (its first block is a
// cross-client hit), then user lines and the model's own replies; a conversation restarts when
// it nears the context. Each client takes turns in 4 conversations (a user who waits between
// turns), so 128 conversations of ~2-3 blocks each are alive; the serving engine's block pool
// (--kv-cache-memory 12M, ~75 blocks of 160 KB) and its L1 (--host-kv-memory 12M, ~75 records)
// are sized below that working set, so hits come from all three tiers (pool, host, store).
//   DEEPINFER_SOAK_CLIENTS (32)  DEEPINFER_SOAK_SECONDS (60)  DEEPINFER_SOAK_MAX_TOKENS (24)
//   DEEPINFER_SOAK_CONVERSATIONS (4 per client)
import { after, test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { spawn } from 'node:child_process';
import OpenAI from 'openai';
import { BIN, STORIES, haveStories, sleep, startServer } from './helpers.mjs';

const clients = Number(process.env.DEEPINFER_SOAK_CLIENTS ?? 32);
const seconds = Number(process.env.DEEPINFER_SOAK_SECONDS ?? 60);
const maxTokens = Number(process.env.DEEPINFER_SOAK_MAX_TOKENS ?? 24);
const CONVERSATIONS_PER_CLIENT = Number(process.env.DEEPINFER_SOAK_CONVERSATIONS ?? 4);
const CONTEXT_BUDGET = 512 - maxTokens - 48;  // restart a conversation before the next turn overflows

const PREAMBLE = Array(5)
  .fill('Once upon a time there was a little girl named Lily who loved to play in the park.')
  .join(' ');
const USER_LINES = [
  'One day she saw a big red ball.', 'Her mom said it was time to go home.',
  'The sun was shining and the birds were singing.', 'Tom wanted to share his toy with her.',
  'They went to the shop to buy some cake.', 'The dog ran fast after the cat.',
  'She was sad because it started to rain.', 'Then they found a little box under the tree.',
];

function percentile(sorted, p) {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];
}

// Sum of a Prometheus counter's series whose labels contain `filter` (NaN when absent).
async function metricSum(url, name, filter = '') {
  const text = await (await fetch(`${url}/metrics`)).text();
  let sum = NaN;
  for (const line of text.split('\n')) {
    const m = line.match(/^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)$/);
    if (!m || m[1] !== name || !(m[2] ?? '').includes(filter)) continue;
    sum = (Number.isNaN(sum) ? 0 : sum) + Number(m[3]);
  }
  return sum;
}

async function startKvstore(args) {
  const proc = spawn(BIN, ['kvstore', ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  proc.stdout.on('data', (d) => { out += d; });
  proc.stderr.on('data', (d) => { out += d; });
  const deadline = Date.now() + 30000;
  while (Date.now() < deadline) {
    const m = out.match(/kvstore listening on 127\.0\.0\.1:(\d+)/);
    if (m) return { proc, port: Number(m[1]), logs: () => out };
    if (proc.exitCode !== null) throw new Error(`kvstore exited early:\n${out}`);
    await sleep(50);
  }
  proc.kill('SIGKILL');
  throw new Error(`kvstore did not start:\n${out}`);
}

const cleanup = [];
after(() => { for (const f of cleanup.reverse()) f(); });

test(`KV tiers soak: ${clients} multi-turn chat clients for ${seconds} s, checked against an uncached server`,
  { skip: haveStories() ? false : 'stories260K absent', timeout: (seconds + 240) * 1000 }, async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'deepinfer-kv-soak-'));
    cleanup.push(() => fs.rmSync(dir, { recursive: true, force: true }));
    const shm = `/deepinfer-soak-${process.pid}`;
    cleanup.push(() => { for (const f of [shm, `${shm}-snap`]) fs.rmSync(`/dev/shm${f}`, { force: true }); });
    const node = await startKvstore(['--dir', dir, '--capacity', '1G', '--port', '0', '--no-sync']);
    cleanup.push(() => { if (node.proc.exitCode === null) node.proc.kill('SIGKILL'); });
    const seqs = String(Math.max(64, clients));
    const server = await startServer(STORIES, ['--served-model-name', 'm', '--max-num-seqs', seqs,
      '--kv-store', `127.0.0.1:${node.port}`, '--host-kv-name', shm, '--host-kv-memory', '12M',
      '--kv-cache-memory', '12M']);
    const reference = await startServer(STORIES, ['--served-model-name', 'm', '--max-num-seqs', seqs,
      '--no-prefix-caching']);
    try {
      const opts = { apiKey: 'x', maxRetries: 0, timeout: 120000 };
      const cached = new OpenAI({ ...opts, baseURL: server.baseURL });
      const plain = new OpenAI({ ...opts, baseURL: reference.baseURL });
      const ttft = [];
      const wrong = [];
      const errors = [];
      let requests = 0;
      let promptTokens = 0;
      let cachedTokens = 0;
      let hitRequests = 0;
      let conversations = 0;
      const deadline = Date.now() + seconds * 1000;
      const worker = async (w) => {
        const convs = Array(CONVERSATIONS_PER_CLIENT).fill(null);
        for (let i = 0; Date.now() < deadline && i < 100000; i++) {
          const slot = i % CONVERSATIONS_PER_CLIENT;
          let prompt = convs[slot];
          if (prompt === null) {
            prompt = `${PREAMBLE} Story ${w}-${i}: ${USER_LINES[(w + i) % USER_LINES.length]}`;
            conversations++;
          } else {
            prompt += ` ${USER_LINES[(w * 3 + i) % USER_LINES.length]}`;
          }
          try {
            const t0 = performance.now();
            const stream = await cached.completions.create({
              model: 'm', prompt, max_tokens: maxTokens, temperature: 0,
              stream: true, stream_options: { include_usage: true },
            });
            let text = '';
            let first = null;
            let usage = null;
            for await (const chunk of stream) {
              if (chunk.usage) usage = chunk.usage;
              const t = chunk.choices?.[0]?.text ?? '';
              if (t && first === null) first = performance.now() - t0;
              text += t;
            }
            if (first !== null) ttft.push(first);
            const ref = await plain.completions.create({ model: 'm', prompt, max_tokens: maxTokens, temperature: 0 });
            requests++;
            const c = usage?.prompt_tokens_details?.cached_tokens ?? 0;
            promptTokens += usage?.prompt_tokens ?? 0;
            cachedTokens += c;
            if (c > 0) hitRequests++;
            if (text !== ref.choices[0].text) wrong.push({ w, i, cached_tokens: c, got: text, want: ref.choices[0].text });
            prompt += text;
            if ((usage?.prompt_tokens ?? 0) + 2 * maxTokens > CONTEXT_BUDGET) prompt = null;
          } catch (e) {
            errors.push(String(e));
            prompt = null;
          }
          convs[slot] = prompt;
        }
      };
      const start = performance.now();
      await Promise.all(Array.from({ length: clients }, (_, w) => worker(w)));
      const elapsed = (performance.now() - start) / 1000;
      ttft.sort((a, b) => a - b);
      const tier = async (t) => metricSum(server.url, 'deepinfer_prefix_cache_tier_hits_total', `tier="${t}"`);
      const report = {
        model: 'stories260K', clients, conversations_per_client: CONVERSATIONS_PER_CLIENT, seconds: Number(elapsed.toFixed(1)), requests, conversations,
        errors: errors.length, wrong: wrong.length,
        prompt_tokens: promptTokens, cached_tokens: cachedTokens,
        hit_rate_tokens: Number((cachedTokens / Math.max(1, promptTokens)).toFixed(3)),
        hit_rate_requests: Number((hitRequests / Math.max(1, requests)).toFixed(3)),
        hit_tokens_by_tier: { pool: await tier('pool'), host: await tier('host'), store: await tier('store') },
        kv_tier: {
          writes: await metricSum(server.url, 'deepinfer_kv_tier_writes_total'),
          dropped_writes: await metricSum(server.url, 'deepinfer_kv_tier_dropped_writes_total'),
          write_failures: await metricSum(server.url, 'deepinfer_kv_tier_write_failures_total'),
          fetches: await metricSum(server.url, 'deepinfer_kv_tier_fetches_total'),
          fetched_blocks: await metricSum(server.url, 'deepinfer_kv_tier_fetched_blocks_total'),
          fetch_failures: await metricSum(server.url, 'deepinfer_kv_tier_fetch_failures_total'),
        },
        ttft_ms: { p50: Number(percentile(ttft, 50).toFixed(1)), p90: Number(percentile(ttft, 90).toFixed(1)),
          p99: Number(percentile(ttft, 99).toFixed(1)) },
        store_files: fs.readdirSync(dir, { recursive: true }).length,
      };
      console.log(`KV TIERS SOAK REPORT ${JSON.stringify(report)}`);
      assert.deepEqual(errors.slice(0, 5), []);
      assert.deepEqual(wrong.slice(0, 3), []);
      assert.ok(requests > clients, `only ${requests} requests`);
      assert.ok(cachedTokens > 0, 'no hits at all');
    } finally {
      assert.equal((await server.stop()).code, 0);
      assert.equal((await reference.stop()).code, 0);
      node.proc.kill('SIGTERM');
    }
  });
