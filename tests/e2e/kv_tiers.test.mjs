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
import { BIN, STORIES, haveStories, sleep, startServer } from './helpers.mjs';

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
