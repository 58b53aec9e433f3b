// Abort test: 200 streaming requests, half of them disconnected at random points. The server
// stays up, every KV block is freed afterwards (/metrics), and the other half complete with
// exactly the golden greedy text of shared/models/stories260K (an independent reference).
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { STORIES, goldenOnceUponATime, haveStories, metric, sleep, startServer } from './helpers.mjs';

const skip = haveStories() ? false : 'shared/models/stories260K is absent';

describe('client disconnects', { skip }, () => {
  let server;
  let client;
  before(async () => {
    server = await startServer(STORIES, ['--served-model-name', 'm']);
    client = new OpenAI({ baseURL: server.baseURL, apiKey: 'x', maxRetries: 0 });
  });
  after(async () => {
    assert.equal((await server?.stop())?.code, 0);
  });

  test('200 streams, half aborted: no leak, the rest exact', async () => {
    const golden = goldenOnceUponATime();
    const expected = golden.text.slice(golden.prompt.length);
    let seed = 12345;
    const rand = () => { seed = (seed * 1103515245 + 12345) % 2147483648; return seed / 2147483648; };
    const total = 200;
    const concurrency = 50;
    let completed = 0;
    let aborted = 0;
    const one = async (i) => {
      const abort = i % 2 === 1;
      const controller = new AbortController();
      const stopAfter = Math.floor(rand() * 40);  // chunks before disconnecting (0 = right away)
      const stream = await client.completions.create({
        model: 'm', prompt: golden.prompt, max_tokens: golden.max_new_tokens, temperature: 0, stream: true,
      }, { signal: controller.signal });
      let text = '';
      let n = 0;
      try {
        for await (const chunk of stream) {
          text += chunk.choices[0]?.text ?? '';
          if (abort && ++n >= stopAfter) {
            controller.abort();
            break;
          }
        }
      } catch (e) {
        if (!abort) throw e;
      }
      if (abort) {
        aborted++;
      } else {
        assert.equal(text, expected, `request ${i}`);
        completed++;
      }
    };
    for (let start = 0; start < total; start += concurrency) {
      await Promise.all(Array.from({ length: Math.min(concurrency, total - start) }, (_, k) => one(start + k)));
    }
    assert.equal(completed, total / 2);
    assert.equal(aborted, total / 2);
    // Aborts are processed asynchronously by the engine: wait (bounded) for the pool to drain.
    let used;
    for (let t = 0; t < 100; t++) {
      used = await metric(server.url, 'deepinfer_kv_blocks_used');
      if (used === 0) break;
      await sleep(100);
    }
    assert.equal(used, 0, 'every KV block is free again');
    assert.equal(await metric(server.url, 'deepinfer_num_requests_running'), 0);
    assert.ok(await metric(server.url, 'deepinfer_http_requests_total', 'status="499"') >= 1,
              'disconnects are counted as 499');
    const r = await client.completions.create({ model: 'm', prompt: golden.prompt, max_tokens: 8, temperature: 0 });
    assert.ok(expected.startsWith(r.choices[0].text));
  });
});
