import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { removeDir, tempDir, waitFor } from '../helpers/mesh.js';
import { gpumesh, gpumeshRun, waitHealthy, type Proc } from '../helpers/processes.js';

// `gpumesh serve` on another port and data folder than the defaults, as `npm start -- --port N --data ./data` is:
// the CLI finds it from the data folder alone, and when it cannot reach a mesh it says what it tried and what to do.
const data = tempDir();
const elsewhere = tempDir();
let serve: Proc;
let url: string;

beforeAll(async () => {
  serve = gpumesh(['serve', '--data', data, '--port', '0']);
  const file = join(data, 'listen.json');
  await waitFor(() => {
    if (serve.child.exitCode !== null) throw new Error(`gpumesh serve exited:\n${serve.output()}`);
    return existsSync(file) && existsSync(join(data, 'admin.grant'));
  }, { timeoutMs: 60_000, what: 'gpumesh serve to listen' });
  const record = JSON.parse(readFileSync(file, 'utf8')) as { url: string; pid: number };
  url = record.url;
  expect(record.pid).toBe(serve.child.pid);
  await waitHealthy(url);
}, 90_000);

afterAll(async () => {
  await serve?.kill();
  removeDir(data);
  removeDir(elsewhere);
});

describe('the CLI finds its mesh', () => {
  it('from --data or GPUMESH_HOME: the URL the mesh recorded in <data>/listen.json (any port)', async () => {
    const byFlag = await gpumeshRun(['status', '--data', data]);
    expect(byFlag.code, byFlag.output).toBe(0);
    expect(byFlag.stdout).toContain(`mesh at ${url}`);
    const byEnv = await gpumeshRun(['status'], { GPUMESH_HOME: data, GPUMESH_URL: undefined });
    expect(byEnv.code, byEnv.output).toBe(0);
    expect(byEnv.stdout).toContain(`mesh at ${url}`);
    expect(serve.output()).toContain(`GPUMESH_HOME=${data}`);
  }, 60_000);

  it('a connection error names the URL, where it came from, and how to point the CLI elsewhere', async () => {
    const explicit = await gpumeshRun(['status', '--url', 'http://127.0.0.1:1']);
    expect(explicit.code).not.toBe(0);
    expect(explicit.output).toContain('cannot reach the orchestrator at http://127.0.0.1:1 (from --url)');
    expect(explicit.output).toMatch(/--url <its URL>, or --data <its data folder> \(or GPUMESH_HOME=<its data folder>\)/);

    // A folder whose mesh stopped (its process is gone): said so, not silently the default.
    writeFileSync(join(elsewhere, 'listen.json'), JSON.stringify({ url: 'http://127.0.0.1:1', pid: 2 ** 22 + 1, startedAt: '' }));
    const busy = await fetch('http://127.0.0.1:7070/healthz').then(() => true, () => false);
    if (busy) return; // something else listens on the default port here; the message below needs it free
    const stale = await gpumeshRun(['status', '--data', elsewhere], { GPUMESH_URL: undefined });
    expect(stale.code).not.toBe(0);
    expect(stale.output).toContain(`cannot reach the orchestrator at http://127.0.0.1:7070 (from the default: the mesh recorded in ${join(elsewhere, 'listen.json')} (pid ${2 ** 22 + 1}) is not running)`);
  }, 60_000);

  it('the record goes when the mesh stops', async () => {
    await serve.kill('SIGTERM');
    expect(existsSync(join(data, 'listen.json'))).toBe(false);
  }, 30_000);
});
