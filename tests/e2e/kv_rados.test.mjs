// The RADOS L2 KV store end to end (issue #25, docs/kv-store-rados.md): a throwaway Ceph cluster
// (scripts/ceph-test-cluster.sh: 1 mon, 1 mgr, 3 OSDs, EC pool k=2 m=1), `deepinfer serve
// --kv-store rados://kv?...` serves a prompt and writes its blocks to the pool, the server is
// restarted with a fresh L1 host tier, and the same prompt hits from RADOS with output (logprobs)
// equal to the uncached run. A `deepinfer kvstore --rados URL --gc-only` worker runs meanwhile and
// must keep the records just hit. The stored objects are checked with Ceph's own `rados` tool.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { execFileSync, spawn } from 'node:child_process';
import OpenAI from 'openai';
import { BIN, STORIES, haveStories, sleep, startServer } from './helpers.mjs';

const SCRIPT = path.resolve('scripts/ceph-test-cluster.sh');
const PROMPT = Array(16)
  .fill('Once upon a time there was a little girl named Lily who loved to play in the park.')
  .join(' ');
const NS = `e2e-${process.pid}`;
const shmNames = [];

function hostName(tag) {
  const name = `/deepinfer-e2e-rados-${process.pid}-${tag}`;
  shmNames.push(name);
  return name;
}

async function complete(server) {
  const client = new OpenAI({ baseURL: server.baseURL, apiKey: 'x' });
  const r = await client.completions.create({
    model: 'stories260K', prompt: PROMPT, max_tokens: 8, temperature: 0, logprobs: 2,
  });
  return { cached: r.usage.prompt_tokens_details?.cached_tokens ?? 0, prompt: r.usage.prompt_tokens,
    logprobs: r.choices[0].logprobs.token_logprobs, text: r.choices[0].text };
}

const haveCeph = (() => {
  try { execFileSync('which', ['ceph-mon', 'ceph-osd', 'rados'], { stdio: 'ignore' }); return true; }
  catch { return false; }
})();

describe('RADOS KV store across a restart', {
  skip: (!haveStories() && 'stories260K absent') || (!haveCeph && 'ceph not installed (scripts/install-deps.sh)'),
}, () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'deepinfer-e2e-ceph-'));
  let url;
  let conf;
  const procs = [];
  const objects = () => execFileSync('rados', ['-c', conf, '-p', 'kv', '--namespace', NS, 'ls'],
    { encoding: 'utf8', timeout: 30000 }).split('\n').filter((l) => /^[0-9a-f]{32}$/.test(l));

  before(() => {
    fs.rmSync(dir, { recursive: true, force: true });
    const out = execFileSync(SCRIPT, ['start', dir], { encoding: 'utf8', timeout: 180000,
      env: { ...process.env, CEPH_TEST_CLUSTER_OWNER_PID: String(process.pid) } });
    conf = path.join(dir, 'ceph.conf');
    url = `rados://kv?conf=${conf}&id=deepinfer&ns=${NS}`;
    process.stderr.write(out);
  });
  after(() => {
    for (const p of procs) if (p.exitCode === null) p.kill('SIGKILL');
    for (const n of shmNames) {
      for (const f of [n, `${n}-snap`]) fs.rmSync(`/dev/shm${f}`, { force: true });
    }
    try { execFileSync(SCRIPT, ['stop', dir], { timeout: 60000 }); } catch { /* best effort */ }
    fs.rmSync(dir, { recursive: true, force: true });
  });

  test('a prompt served, the server restarted: the same prompt hits from RADOS, same output', async () => {
    const s0 = await startServer(STORIES, ['--no-prefix-caching']);
    let reference;
    try { reference = await complete(s0); } finally { await s0.stop(); }
    assert.equal(reference.cached, 0);

    const gc = spawn(BIN, ['kvstore', '--rados', url, '--gc-only', '--capacity', '1G',
      '--gc-interval', '1s'], { stdio: ['ignore', 'pipe', 'pipe'] });
    procs.push(gc);
    let gcLog = '';
    gc.stdout.on('data', (d) => { gcLog += d; });
    gc.stderr.on('data', (d) => { gcLog += d; });

    const first = await startServer(STORIES, ['--kv-store', url, '--host-kv-name', hostName('r1')]);
    const a = await complete(first);
    assert.equal(a.cached, 0);
    assert.deepEqual(a.logprobs, reference.logprobs);
    const blocks = Math.floor((a.prompt - 1) / 128);  // Llama: whole blocks, hit <= L - 1
    // Write-back is asynchronous: wait until the pool holds the prompt's blocks.
    for (let i = 0; i < 100 && objects().length < blocks; i++) await sleep(100);
    assert.ok(objects().length >= blocks, `pool holds ${objects().length} objects, want ${blocks}`);
    await first.stop();

    // Restarted with a fresh L1 host tier: the hit can only come from the RADOS pool.
    const second = await startServer(STORIES, ['--kv-store', url, '--host-kv-name', hostName('r2')]);
    const b = await complete(second);
    assert.equal(b.cached, blocks * 128);
    assert.deepEqual(b.logprobs, reference.logprobs);
    assert.equal(b.text, reference.text);
    await sleep(2500);  // GC passes run and keep the records just hit
    await second.stop();
    assert.match(gcLog, /kvstore gc: \d+ records/);
    assert.ok(objects().length >= blocks, 'the GC kept the records that were just hit');
    gc.kill('SIGTERM');
  });

  test('a RADOS URL that names no reachable cluster is a clear start-up error', async () => {
    await assert.rejects(
      startServer(STORIES, ['--kv-store', 'rados://kv?conf=/nonexistent/ceph.conf&id=deepinfer'],
        { timeoutMs: 30000 }),
      /--kv-store/);
  });
});
