// Issue 22 §6: the server under bodies meant to hurt it (stories260K: a 512-token context, so
// every bound is reached with small bodies), through the official openai client and raw HTTP.
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { STORIES, haveStories, postRaw, sleep, startServer } from './helpers.mjs';

const skip = haveStories() ? false : 'shared/models/stories260K is absent';

describe('hardening', { skip }, () => {
  test('a prompt that provably exceeds the context is rejected before tokenizing', async () => {
    const server = await startServer(STORIES, ['--served-model-name', 'm']);
    try {
      const client = new OpenAI({ baseURL: server.baseURL, apiKey: 'unused', maxRetries: 0 });
      // 200,000 bytes: no stories260K token is longer than a few dozen bytes, so at least
      // thousands of tokens against a 512-token context.
      await assert.rejects(
        client.completions.create({ model: 'm', prompt: 'a'.repeat(200000), max_tokens: 1 }),
        (e) => e instanceof OpenAI.BadRequestError && e.code === 'context_length_exceeded' &&
               /200000 bytes of text, at least \d+ tokens/.test(e.message));
      // 3,000 bytes of punctuation (about a token a byte: under the byte bound of 512 tokens x the
      // longest token, yet several times the context): the tokenizer stops once it
      // has more ids than the context (memory bounded by the context).
      await assert.rejects(
        client.completions.create({ model: 'm', prompt: '!?,'.repeat(1000), max_tokens: 1 }),
        (e) => e instanceof OpenAI.BadRequestError && e.code === 'context_length_exceeded' &&
               e.param === 'prompt' && /has more than 512 tokens/.test(e.message));
      // Just over the context: the same early answer; at most the context, the exact count.
      await assert.rejects(
        client.completions.create({ model: 'm', prompt: 'Once '.repeat(520), max_tokens: 1 }),
        (e) => e.code === 'context_length_exceeded' &&
               /(has more than 512 tokens|resulted in \d+ tokens)/.test(e.message));
    } finally {
      assert.equal((await server.stop()).code, 0);
    }
  });

  test('an object with 1,000,000 keys parses in linear time (logit_bias)', async () => {
    const server = await startServer(STORIES, ['--served-model-name', 'm']);
    try {
      const keys = [];
      for (let i = 0; i < 1000000; i++) keys.push(`"${i}":0`);
      const body = `{"model":"m","prompt":"Once","max_tokens":1,"logit_bias":{${keys.join(',')}}}`;
      const t0 = Date.now();
      const r = await postRaw(`${server.baseURL}/completions`, body);
      // The ids are outside stories260K's vocabulary: a 400 naming logit_bias, answered in
      // seconds (the quadratic parser took minutes).
      assert.equal(r.status, 400, r.text);
      assert.ok(['logit_bias', null].includes(r.json.error.param), r.text);
      assert.ok(Date.now() - t0 < 15000, `${Date.now() - t0} ms`);
    } finally {
      assert.equal((await server.stop()).code, 0);
    }
  });

  test('SIGTERM ends the process within the shutdown deadline while a request thread is busy', async () => {
    const server = await startServer(STORIES, ['--served-model-name', 'm', '--shutdown-timeout', '1']);
    const keys = [];
    for (let i = 0; i < 2000000; i++) keys.push(`"k${i}":${i}`);
    const body = `{"model":"m","prompt":"Once","max_tokens":1,"logit_bias":{${keys.join(',')}}}`;
    const pending = postRaw(`${server.baseURL}/completions`, body).catch(() => null);
    await sleep(300);
    const t0 = Date.now();
    server.proc.kill('SIGTERM');
    const r = await server.exited;
    const took = Date.now() - t0;
    await pending;
    assert.equal(r.code, 0);
    // Deadline 1 s + the 2 s grace for ending responses + 0.5 s for busy threads, with slack.
    assert.ok(took < 6000, `exit took ${took} ms`);
  });

  test('a client gone before the first token is logged with the time actually spent', async () => {
    const server = await startServer(STORIES, ['--served-model-name', 'm']);
    try {
      const ac = new AbortController();
      // Headers come before the first token (the stream begins, then prefill runs).
      const res = await fetch(`${server.baseURL}/completions`, {
        method: 'POST', signal: ac.signal, headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'm', prompt: 'Once '.repeat(90), max_tokens: 400, stream: true }),
      });
      assert.equal(res.status, 200);
      ac.abort();
      let line;
      for (let i = 0; i < 100 && !line; i++) {
        await sleep(20);
        line = server.logs().split('\n').find((l) => /request cmpl-\S+ completions status=499 /.test(l));
      }
      assert.ok(line, server.logs());
      // The old record took its arrival from the first engine output: total_ms=0 without one.
      const total = Number(line.match(/total_ms=([\d.e+-]+)/)[1]);
      assert.ok(total > 0, line);
      assert.match(line, /ttft_ms=(none|[\d.e+-]+) /);
    } finally {
      assert.equal((await server.stop()).code, 0);
    }
  });
});
