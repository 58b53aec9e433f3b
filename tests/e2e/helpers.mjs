// Shared helpers for the end-to-end tests: start `deepinfer serve` on a free loopback port,
// wait for /health, stop it; locate the models. The tests talk to it with the official `openai`
// npm client (pinned in the repo's package-lock.json), so the server is checked by an
// implementation independent of ours.
//
// Environment (set by tests/e2e/CMakeLists.txt):
//   DEEPINFER_BIN         path to the deepinfer binary
//   DEEPINFER_SHARED_DIR  ../shared (models and goldens)
//   DEEPINFER_E2E_CACHE   directory where the demo checkpoint is generated once and reused
//   DEEPINFER_E2E_DEMO_ARCH  architecture of the `demo` checkpoint: deepseek_v4 (default) or
//                         deepseek_v41 (the same suites on the DeepSeek-V4.1 demo preset)
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';

export const BIN = process.env.DEEPINFER_BIN ?? path.resolve('build/bin/deepinfer');
export const SHARED = process.env.DEEPINFER_SHARED_DIR ?? path.resolve('../shared');
export const CACHE = process.env.DEEPINFER_E2E_CACHE ?? path.resolve('build/e2e-models');
export const STORIES = path.join(SHARED, 'models', 'stories260K');

export function haveStories() {
  return fs.existsSync(path.join(STORIES, 'config.json'));
}

export const DEMO_ARCH = process.env.DEEPINFER_E2E_DEMO_ARCH || 'deepseek_v4';

// The `demo` preset checkpoint (DeepSeek-V4 layout, or V4.1 with DEEPINFER_E2E_DEMO_ARCH;
// random weights, DeepSeek tokenizer), generated on first use. Returns its directory, or null when it cannot be made (the caller
// skips its tests and says why).
let demoDir;
export function demoModel() {
  if (demoDir !== undefined) return demoDir;
  const dir = path.join(CACHE, DEMO_ARCH === 'deepseek_v4' ? 'demo' : `demo-${DEMO_ARCH}`);
  if (fs.existsSync(path.join(dir, 'config.json')) && fs.existsSync(path.join(dir, 'tokenizer.json'))) {
    demoDir = dir;
    return dir;
  }
  fs.mkdirSync(CACHE, { recursive: true });
  const tmp = `${dir}.tmp-${process.pid}`;
  const r = spawnSync(BIN, ['make-test-model', '--arch', DEMO_ARCH, '--preset', 'demo', '--out', tmp],
                      { encoding: 'utf8' });
  if (r.status !== 0) {
    console.error(`make-test-model failed (${r.status}): ${r.stderr}`);
    fs.rmSync(tmp, { recursive: true, force: true });
    demoDir = null;
    return null;
  }
  try {
    fs.renameSync(tmp, dir);
  } catch {
    fs.rmSync(tmp, { recursive: true, force: true });  // another test made it meanwhile
  }
  demoDir = dir;
  return dir;
}

// Starts `deepinfer serve --model DIR --port 0 ...extraArgs`; resolves to
// { url, baseURL, port, proc, logs(), stop() } once /health answers 200.
export async function startServer(modelDir, extraArgs = [], { timeoutMs = 120000 } = {}) {
  const args = ['serve', '--model', modelDir, '--host', '127.0.0.1', '--port', '0', ...extraArgs];
  const proc = spawn(BIN, args, { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  let err = '';
  proc.stdout.on('data', (d) => { out += d; });
  proc.stderr.on('data', (d) => { err += d; });
  const exited = new Promise((resolve) => proc.on('exit', (code, signal) => resolve({ code, signal })));
  const deadline = Date.now() + timeoutMs;
  let port = null;
  while (Date.now() < deadline) {
    const m = out.match(/listening on http:\/\/127\.0\.0\.1:(\d+)/);
    if (m) { port = Number(m[1]); break; }
    if (proc.exitCode !== null) throw new Error(`server exited early (${proc.exitCode}):\n${err}`);
    await sleep(50);
  }
  if (port === null) { proc.kill('SIGKILL'); throw new Error(`server did not start:\n${err}`); }
  const url = `http://127.0.0.1:${port}`;
  while (Date.now() < deadline) {
    try {
      const r = await fetch(`${url}/health`);
      if (r.status === 200) break;
    } catch { /* not yet */ }
    await sleep(50);
  }
  return {
    url,
    baseURL: `${url}/v1`,
    port,
    proc,
    logs: () => err,
    exited,
    async stop(signal = 'SIGTERM') {
      if (proc.exitCode !== null || proc.signalCode !== null) return exited;
      proc.kill(signal);
      const t = setTimeout(() => proc.kill('SIGKILL'), 20000);
      const r = await exited;
      clearTimeout(t);
      return r;
    },
  };
}

// Every event of an SDK stream (the promise an SDK's create({stream: true}) returns), in order.
export async function collectEvents(streamPromise) {
  const events = [];
  for await (const ev of await streamPromise) events.push(ev);
  return events;
}

export function sleep(ms) {
  return new Promise((r) => setTimeout(r, ms));
}

// Reads a Prometheus text metric value (first series matching name and optional label filter).
export async function metric(url, name, labelFilter = '') {
  const text = await (await fetch(`${url}/metrics`)).text();
  for (const line of text.split('\n')) {
    if (line.startsWith('#')) continue;
    const m = line.match(/^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)$/);
    if (!m || m[1] !== name) continue;
    if (labelFilter && !(m[2] ?? '').includes(labelFilter)) continue;
    return Number(m[3]);
  }
  return undefined;
}

// POST raw body; returns { status, json }.
export async function postRaw(url, body, headers = {}) {
  const r = await fetch(url, { method: 'POST', body, headers: { 'content-type': 'application/json', ...headers } });
  const text = await r.text();
  let json = null;
  try { json = JSON.parse(text); } catch { /* not JSON */ }
  return { status: r.status, json, text };
}

export function goldenOnceUponATime() {
  return JSON.parse(fs.readFileSync(path.join(STORIES, 'golden', 'once_upon_a_time.json'), 'utf8'));
}

// Tool parameter schemas shared by the Messages and Responses tool-call tests.
export const WEATHER = {
  type: 'object',
  properties: { city: { type: 'string', maxLength: 12 }, days: { type: 'integer', minimum: 1, maximum: 7 } },
  required: ['city', 'days'],
  additionalProperties: false,
};
export const TIME = {
  type: 'object',
  properties: { zone: { enum: ['UTC', 'CET', 'PST'] } },
  required: ['zone'],
  additionalProperties: false,
};

// A /v1/completions answer reduced to what speculative decoding must not change:
// { text, finish, usage: { prompt, completion } } — non-streamed, and streamed (text from the
// deltas, finish from the last chunk that has one, usage from the include_usage chunk).
export async function completionOutcome(client, model, req) {
  const r = await client.completions.create({ model, ...req });
  const c = r.choices[0];
  return { text: c.text, finish: c.finish_reason,
           usage: { prompt: r.usage.prompt_tokens, completion: r.usage.completion_tokens } };
}

export async function completionOutcomeStream(client, model, req) {
  const stream = await client.completions.create({ model, ...req, stream: true,
                                                   stream_options: { include_usage: true } });
  let text = '';
  let finish = null;
  let usage = null;
  for await (const chunk of stream) {
    if (chunk.usage) usage = { prompt: chunk.usage.prompt_tokens, completion: chunk.usage.completion_tokens };
    const c = chunk.choices?.[0];
    if (!c) continue;
    text += c.text ?? '';
    finish = c.finish_reason ?? finish;
  }
  return { text, finish, usage };
}
