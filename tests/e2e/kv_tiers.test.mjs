// KV tiers through real processes (issue "KV cache system, part 3"; docs/kv-tiers.md): a prompt
// served by one `deepinfer serve` is a hit for a restarted server and for a second server, through
// a `deepinfer kvstore` node and through a shared `--kv-store-dir` with a `--gc-only` process
// running; a store that is down at start costs only misses. Each server gets its own host-tier
// name, so hits must come from L2 (the store), not from a shared L1. The expected logprobs are the
// first, uncached run's: a hit must not change them (stories260K: plain block reuse, exact).
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { spawn } from 'node:child_process';
import OpenAI from 'openai';
import { BIN, STORIES, demoModel, haveStories, metric, postRaw, sleep, startServer } from './helpers.mjs';

const PROMPT = Array(16)
  .fill('Once upon a time there was a little girl named Lily who loved to play in the park.')
  .join(' ');
const shmNames = [];

function hostName(tag) {
  const name = `/deepinfer-e2e-${process.pid}-${tag}`;
  shmNames.push(name);
  return name;
}

function removeShm() {
  for (const n of shmNames) {
    for (const f of [n, `${n}-snap`]) fs.rmSync(`/dev/shm${f}`, { force: true });
  }
}

// Starts `deepinfer kvstore ...args`; resolves once it printed `readyPattern`.
async function startKvstore(args, readyPattern) {
  const proc = spawn(BIN, ['kvstore', ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  proc.stdout.on('data', (d) => { out += d; });
  proc.stderr.on('data', (d) => { out += d; });
  const deadline = Date.now() + 30000;
  while (Date.now() < deadline) {
    const m = out.match(readyPattern);
    if (m) return { proc, match: m, logs: () => out };
    if (proc.exitCode !== null) throw new Error(`kvstore exited early:\n${out}`);
    await sleep(50);
  }
  proc.kill('SIGKILL');
  throw new Error(`kvstore did not start:\n${out}`);
}

async function complete(server) {
  const client = new OpenAI({ baseURL: server.baseURL, apiKey: 'x' });
  const r = await client.completions.create({
    model: 'stories260K', prompt: PROMPT, max_tokens: 8, temperature: 0, logprobs: 2,
  });
  return { cached: r.usage.prompt_tokens_details?.cached_tokens ?? 0, prompt: r.usage.prompt_tokens,
    logprobs: r.choices[0].logprobs.token_logprobs, text: r.choices[0].text };
}

describe('KV tiers across processes', { skip: !haveStories() && 'stories260K absent' }, () => {
  const dirs = [];
  const procs = [];
  const tmp = (tag) => {
    const d = fs.mkdtempSync(path.join(os.tmpdir(), `deepinfer-kv-${tag}-`));
    dirs.push(d);
    return d;
  };
  after(async () => {
    for (const p of procs) if (p.exitCode === null) p.kill('SIGKILL');
    removeShm();
    for (const d of dirs) fs.rmSync(d, { recursive: true, force: true });
  });

  let reference;
  before(async () => {
    const s = await startServer(STORIES, ['--no-prefix-caching']);
    try { reference = await complete(s); } finally { await s.stop(); }
    assert.equal(reference.cached, 0);
  });

  test('store node: a restarted server and a second server hit what the first wrote', async () => {
    const node = await startKvstore(['--dir', tmp('node'), '--capacity', '1G', '--port', '0',
      '--no-sync'], /kvstore listening on 127\.0\.0\.1:(\d+)/);
    procs.push(node.proc);
    const store = `127.0.0.1:${node.match[1]}`;
    const first = await startServer(STORIES, ['--kv-store', store, '--host-kv-name', hostName('n1')]);
    const a = await complete(first);
    assert.equal(a.cached, 0);
    assert.deepEqual(a.logprobs, reference.logprobs);
    // A second server (another machine: its own L1) while the first still runs.
    const second = await startServer(STORIES, ['--kv-store', store, '--host-kv-name', hostName('n2')]);
    const expectHit = Math.floor((a.prompt - 1) / 128) * 128;  // Llama: whole blocks, <= L - 1
    const b = await complete(second);
    assert.equal(b.cached, expectHit);
    assert.deepEqual(b.logprobs, reference.logprobs);
    await first.stop();
    await second.stop();
    // Restart with a fresh L1: still a hit, from the store.
    const third = await startServer(STORIES, ['--kv-store', store, '--host-kv-name', hostName('n3')]);
    const c = await complete(third);
    assert.equal(c.cached, expectHit);
    assert.deepEqual(c.logprobs, reference.logprobs);
    await third.stop();
    node.proc.kill('SIGTERM');
  });

  test('shared directory with a --gc-only process: servers share records', async () => {
    const dir = tmp('dir');
    const gc = await startKvstore(['--dir', dir, '--gc-only', '--capacity', '1G',
      '--gc-interval', '1s'], /gc|GC|pass/);
    procs.push(gc.proc);
    const one = await startServer(STORIES, ['--kv-store-dir', dir, '--host-kv-name', hostName('d1')]);
    const two = await startServer(STORIES, ['--kv-store-dir', dir, '--host-kv-name', hostName('d2')]);
    const a = await complete(one);
    assert.equal(a.cached, 0);
    await sleep(500);  // write-back is asynchronous
    const b = await complete(two);
    assert.equal(b.cached, Math.floor((a.prompt - 1) / 128) * 128);
    assert.deepEqual(b.logprobs, reference.logprobs);
    await sleep(1500);  // a GC pass runs meanwhile and keeps the records just hit
    await one.stop();
    await two.stop();
    const three = await startServer(STORIES, ['--kv-store-dir', dir, '--host-kv-name', hostName('d3')]);
    const c = await complete(three);
    assert.equal(c.cached, b.cached);
    assert.deepEqual(c.logprobs, reference.logprobs);
    await three.stop();
    gc.proc.kill('SIGTERM');
  });

  test('a store node that is down at start only costs misses', async () => {
    const s = await startServer(STORIES, ['--kv-store', '127.0.0.1:9', '--host-kv-name', hostName('down'),
      '--kv-fetch-timeout-ms', '300']);
    const a = await complete(s);
    assert.equal(a.cached, 0);
    assert.deepEqual(a.logprobs, reference.logprobs);
    await s.stop();
  });
});

// DeepSeek-V4 (the demo preset: sliding window 128, so a hit needs an SWA snapshot or a bounded
// replay) restarted on the same --kv-store-dir: with the same --host-kv-name the snapshot survived
// in the shared-memory arena, so the hit is exact (bitwise, DEEPINFER_BATCH_INVARIANT=1); with a
// fresh name the blocks come from L2 and the window state is rebuilt by a replay, which on W = 128
// is approximate (docs/prefix-cache.md "What a replay costs in accuracy"): only the shape of that
// answer is asserted. The first request is sent as `X-Traffic-Class: agent`; its records carry
// the class byte (offset 60, kv/block_record.h).
const DEMO = demoModel();
const IDS = Array.from({ length: 640 }, (_, i) => 100 + ((i * 7919) % 50000));
// IDS and 100 more: its hit cap (740 - 134 = 606) reaches IDS's prefill snapshot at 512.
const LONG = [...IDS, ...Array.from({ length: 100 }, (_, i) => 200 + ((i * 104729) % 40000))];

// The last per-request log line's tier fields (api/request_pump.cc).
// The fields of the server's latest completions log line (written just after the response, so
// wait for it: `count` lines expected so far).
async function logFields(server, count = 1) {
  let lines = [];
  for (let i = 0; i < 100; i++) {
    lines = server.logs().split('\n').filter((l) => l.includes(' completions status='));
    if (lines.length >= count) break;
    await sleep(20);
  }
  const last = lines[lines.length - 1] ?? '';
  const f = {};
  for (const k of ['cached_tokens', 'cached_host_tokens', 'cached_store_tokens', 'replayed_tokens']) {
    const m = last.match(new RegExp(`\\b${k}=(\\d+)`));
    f[k] = m ? Number(m[1]) : undefined;
  }
  return f;
}

async function completeIds(server, headers = {}, ids = IDS) {
  const r = await postRaw(`${server.baseURL}/completions`, JSON.stringify({
    prompt: ids, max_tokens: 4, temperature: 0, logprobs: 1,
  }), headers);
  assert.equal(r.status, 200, r.text);
  return { cached: r.json.usage.prompt_tokens_details?.cached_tokens ?? 0,
    logprobs: r.json.choices[0].logprobs.token_logprobs };
}

function recordFiles(dir) {
  const out = [];
  const walk = (d) => {
    for (const e of fs.readdirSync(d, { withFileTypes: true })) {
      const p = path.join(d, e.name);
      if (e.isDirectory() && e.name !== 'tmp') walk(p);
      else if (e.isFile() && e.name.endsWith('.kvb')) out.push(p);
    }
  };
  walk(dir);
  return out;
}

describe('DeepSeek-V4 restart on the KV tiers', { skip: !DEMO && 'demo model unavailable' }, () => {
  const dirs = [];
  const tiers = (dir, tag) => ['--kv-store-dir', dir, '--host-kv-name', hostName(tag),
    '--host-kv-memory', '256M', '--host-snapshot-memory', '256M'];
  before(() => { process.env.DEEPINFER_BATCH_INVARIANT = '1'; });
  after(() => {
    removeShm();
    for (const d of dirs) fs.rmSync(d, { recursive: true, force: true });
  });

  test('traffic_class: a bad value is a 400 naming the field, in each API\'s shape', async () => {
    const s = await startServer(DEMO, ['--no-prefix-caching']);
    try {
      const c = await postRaw(`${s.baseURL}/completions`,
        JSON.stringify({ prompt: [1, 2], max_tokens: 1, traffic_class: 'batch' }));
      assert.equal(c.status, 400);
      assert.equal(c.json.error.param, 'traffic_class');
      const h = await postRaw(`${s.baseURL}/completions`, JSON.stringify({ prompt: [1, 2], max_tokens: 1 }),
        { 'x-traffic-class': 'batch' });
      assert.equal(h.status, 400);
      assert.equal(h.json.error.param, 'X-Traffic-Class');
      const m = await postRaw(`${s.baseURL}/messages`, JSON.stringify({ model: 'demo', max_tokens: 1,
        messages: [{ role: 'user', content: 'x' }], traffic_class: 7 }));
      assert.equal(m.status, 400);
      assert.equal(m.json.type, 'error');
      assert.match(m.json.error.message, /^traffic_class: /);
    } finally { await s.stop(); }
  });

  test('same --host-kv-name: exact from the snapshot; fresh name: from L2 with a replay', async (t) => {
    const started = [];
    const start = async (...a) => { const srv = await startServer(...a); started.push(srv); return srv; };
    t.after(async () => { for (const srv of started) await srv.stop('SIGKILL'); });
    const ref = await start(DEMO, ['--no-prefix-caching']);
    let reference;
    // A snapshot is found only by a prompt that extends the one that left it (the hit rule caps a
    // hit at L - 134, below the first prompt's last boundary), so the restarts send LONG.
    try { reference = await completeIds(ref, {}, LONG); } finally { await ref.stop(); }
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'deepinfer-kv-v4-'));
    dirs.push(dir);
    const flagsA = tiers(dir, 'v4a');
    const first = await start(DEMO, flagsA);
    const a = await completeIds(first, { 'x-traffic-class': 'agent' });
    assert.equal(a.cached, 0);
    await first.stop();  // finishes the queued write-backs
    const records = recordFiles(dir);
    assert.ok(records.length >= 4, `records: ${records.length}`);  // floor(643 / 128) blocks
    for (const f of records) assert.equal(fs.readFileSync(f)[60], 1, `${f}: class byte`);  // agent

    const same = await start(DEMO, flagsA);  // same machine: L1 and its snapshots survived
    const b = await completeIds(same, {}, LONG);
    const fb = await logFields(same);
    assert.ok(b.cached >= 128 && b.cached % 128 === 0, `cached ${b.cached}`);
    assert.equal(fb.cached_tokens, b.cached);
    assert.equal(fb.cached_host_tokens, b.cached);
    assert.equal(fb.cached_store_tokens, 0);
    assert.equal(fb.replayed_tokens, 0);
    assert.deepEqual(b.logprobs, reference.logprobs);  // bitwise
    assert.equal(await metric(same.url, 'deepinfer_prefix_cache_tier_hits_total', 'tier="host"'), b.cached);
    assert.equal(await metric(same.url, 'deepinfer_prefix_cache_tier_hits_total', 'tier="store"'), 0);
    assert.ok(await metric(same.url, 'deepinfer_kv_tier_snapshot_reads_total') >= 1);
    await same.stop();

    const other = await start(DEMO, tiers(dir, 'v4b'));  // another machine: only L2
    const c = await completeIds(other, {}, LONG);
    const fc = await logFields(other);
    console.log(`L2 restart: cached_tokens=${c.cached} replayed_tokens=${fc.replayed_tokens}`);
    assert.ok(c.cached >= 128 && c.cached % 128 === 0, `cached ${c.cached}`);
    assert.equal(fc.cached_store_tokens, c.cached);
    assert.ok(fc.replayed_tokens > 0 && fc.replayed_tokens <= 128, `replayed ${fc.replayed_tokens}`);
    // W = 128: the replayed window state is approximate, no bound to assert on the values.
    assert.equal(c.logprobs.length, reference.logprobs.length);
    for (const lp of c.logprobs) assert.ok(Number.isFinite(lp) && lp <= 0);
    assert.equal(await metric(other.url, 'deepinfer_prefix_cache_tier_hits_total', 'tier="store"'), c.cached);
    assert.ok(await metric(other.url, 'deepinfer_kv_tier_fetches_total') >= 1);
    // The fetch brings the whole hit chain, the replayed block included.
    assert.equal(await metric(other.url, 'deepinfer_kv_tier_fetched_blocks_total'),
      (c.cached + fc.replayed_tokens) / 128);
    assert.equal(await metric(other.url, 'deepinfer_kv_tier_fetch_failures_total'), 0);
    assert.equal(await metric(other.url, 'deepinfer_kv_tier_write_failures_total', 'tier="l2"'), 0);
    await other.stop();
  });
});
