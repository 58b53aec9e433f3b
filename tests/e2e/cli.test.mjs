// Issue 22 §7: first contact with the command line. Help goes to stdout (so `| less` shows it),
// `version --help` prints help, flag errors carry the command's prefix once, and a --model that
// is missing or not a model directory is named.
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { BIN } from './helpers.mjs';

// The test harness's own DEEPINFER_* variables (DEEPINFER_BIN, ...) would draw "unknown
// environment variable" warnings on stderr: run the binary without them.
const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('DEEPINFER_')));

function run(...args) {
  return spawnSync(BIN, args, { encoding: 'utf8', timeout: 30000, env });
}

describe('cli', () => {
  test('deepinfer, --help and help print the usage to stdout', () => {
    for (const args of [[], ['--help'], ['help'], ['-h']]) {
      const r = run(...args);
      assert.match(r.stdout, /^Usage: deepinfer <command>/, args.join(' '));
      assert.match(r.stdout, /\n  serve /);
      assert.equal(r.stderr, '', args.join(' '));
      assert.equal(r.status, args.length === 0 ? 2 : 0);
    }
    const unknown = run('serv');
    assert.equal(unknown.status, 2);
    assert.match(unknown.stderr, /unknown command 'serv'/);
  });

  test('version --help prints help, version prints the version', () => {
    const help = run('version', '--help');
    assert.equal(help.status, 0);
    assert.match(help.stdout, /^Usage: deepinfer version/);
    assert.doesNotMatch(help.stdout, /cpu features/);
    const v = run('version');
    assert.equal(v.status, 0);
    assert.match(v.stdout, /^deepinfer \d+\.\d+\.\d+\n/);
    assert.equal(run('version', '--bogus').status, 2);
  });

  test('serve: flag errors carry the prefix once and name the flag', () => {
    for (const args of [['--max-num-seqs', 'x'], ['--prot', '1'], ['--port', '1', '--port', '2'],
                        ['--allowed-origins', '[1]']]) {
      const r = run('serve', '--model', os.tmpdir(), ...args);
      assert.equal(r.status, 2, args.join(' '));
      assert.match(r.stderr, /^deepinfer serve: /, args.join(' '));
      assert.doesNotMatch(r.stderr, /deepinfer serve: deepinfer serve:/, args.join(' '));
      assert.match(r.stderr, new RegExp(args[0]));
    }
  });

  test('serve --model names a missing directory and one that is not a model', () => {
    const missing = run('serve', '--model', '/nonexistent-deepinfer-model');
    assert.equal(missing.status, 1);
    assert.equal(missing.stderr,
      'deepinfer serve: model directory /nonexistent-deepinfer-model does not exist or is not a directory\n');
    const empty = fs.mkdtempSync(path.join(os.tmpdir(), 'deepinfer-not-a-model-'));
    try {
      const r = run('serve', '--model', empty);
      assert.equal(r.status, 1);
      assert.match(r.stderr, new RegExp(`^deepinfer serve: ${empty} is not a model directory: it has no config.json`));
      assert.doesNotMatch(r.stderr, /tokenizer\.json/);
    } finally {
      fs.rmSync(empty, { recursive: true, force: true });
    }
  });
});
