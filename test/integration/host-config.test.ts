import { chmodSync, existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { stringify } from 'yaml';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MeshClient } from '../../src/cli/common/client.js';
import { removeDir, tempDir, waitFor } from '../helpers/mesh.js';
import { gpumesh, startServe, type Proc } from '../helpers/processes.js';

/**
 * The orchestrator can never make a host run a command its owner did not configure there. A real `gpumesh serve`
 * whose mesh.yaml names a command for model `stamp`, and two real agents joined to it: `owned`, whose own host.yaml
 * declares `stamp` and `ref` with commands of its own, and `bare`, which declares nothing. Over HTTP an admin may add
 * a data model or a reference to a model hosts declare, never a command, a server, a URL or a file of a host.
 */
const data = tempDir('gpumesh-host-config-');
const scripts = tempDir('gpumesh-host-scripts-');
const processes: Proc[] = [];
let url: string;
let serve: Proc;
let admin: string;

/** A command that says which script ran, as its job's JSON result; the orchestrator's also leaves a marker file. */
const script = (who: string, marker?: string): string => `
const fs = require('fs');
const input = JSON.parse(fs.readFileSync(0, 'utf8'));
${marker ? `fs.writeFileSync(${JSON.stringify(marker)}, 'the orchestrator\\'s command ran');` : ''}
fs.writeFileSync(require('path').join(input.outputDir, 'result.json'), JSON.stringify({ ranBy: ${JSON.stringify(who)} }));
`;
const marker = join(scripts, 'orchestrator-command-ran');

async function call(method: string, path: string, body?: unknown): Promise<{ status: number; json: any }> {
  const response = await fetch(`${url}${path}`, {
    method, headers: { authorization: `Bearer ${admin}`, prefer: 'wait=60', ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await response.text();
  return { status: response.status, json: text ? JSON.parse(text) : null };
}

async function joinHost(host: string, hostConfig: Record<string, unknown> | null): Promise<void> {
  const { token } = await new MeshClient(url, admin).request<{ token: string }>('POST', '/v1/grants', { kind: 'agent', host, classes: ['image'] });
  const dir = join(data, 'agents', host);
  mkdirSync(dir, { recursive: true });
  const args = ['agent', '--join', url, '--grant', token, '--data', dir];
  if (hostConfig) {
    writeFileSync(join(dir, 'host.yaml'), stringify(hostConfig));
  }
  processes.push(gpumesh(args));
  await waitFor(async () => (await call('GET', '/v1/status')).json.hosts.some((entry: { id: string }) => entry.id === host), { timeoutMs: 30_000, what: `${host} to join` });
}

beforeAll(async () => {
  chmodSync(scripts, 0o755);
  writeFileSync(join(scripts, 'orchestrator.cjs'), script('the orchestrator\'s mesh.yaml', marker));
  writeFileSync(join(scripts, 'host.cjs'), script('owned\'s host.yaml'));
  // `jobTypes`: the former name of `types`, still read (the log says so; see the last test).
  writeFileSync(join(data, 'mesh.yaml'), stringify({
    models: { stamp: { engine: 'exec', jobTypes: ['image'], memoryMB: 16, settings: { command: [process.execPath, join(scripts, 'orchestrator.cjs')] } } },
  }));
  const served = await startServe(data);
  serve = served.proc;
  processes.push(serve);
  ({ url, admin } = served);
  const hostCommand = { command: [process.execPath, join(scripts, 'host.cjs')] };
  await joinHost('owned', { models: { stamp: { settings: hostCommand }, ref: { settings: hostCommand } } });
  await joinHost('bare', null);
}, 120_000);

afterAll(async () => {
  for (const proc of processes.reverse()) await proc.kill();
  removeDir(data);
  removeDir(scripts);
});

describe('what a host runs is its owner\'s to say', () => {
  it('a command model runs where the host declares it, with the host\'s own command: the orchestrator\'s never runs; a host that declares nothing is passed over', async () => {
    const status = await call('GET', '/v1/status');
    expect(Object.fromEntries(status.json.hosts.map((host: { id: string; configured: string[] | null }) => [host.id, host.configured])))
      .toEqual({ owned: ['stamp', 'ref'], bare: [] });
    for (let index = 0; index < 3; index++) {
      const job = await call('POST', '/v1/jobs', { type: 'image', model: 'stamp', input: { prompt: `stamp ${index}` } });
      expect(job.json.status, JSON.stringify(job.json.error)).toBe('succeeded');
      expect(job.json.result).toEqual({ ranBy: 'owned\'s host.yaml' });
      expect(job.json.attempts.map((attempt: { host: string }) => attempt.host)).toEqual(['owned']);
      const skipped = job.json.attempts[0].route.skipped as { host: string; reason: string }[];
      expect(skipped).toContainEqual({ host: 'bare', reason: 'not configured' });
    }
    expect(existsSync(marker)).toBe(false);
  });

  it('over the API a command, a server, a URL, a host\'s file, a key\'s variable or the agent\'s process is refused with 403 HOST_CONFIG_ONLY, and nothing is added', async () => {
    const attempts: [string, Record<string, unknown>][] = [
      ['exec', { command: ['node', '-e', 'require("fs").writeFileSync("/tmp/pwned", "")'] }],
      ['exec', { command: 'sh -c id', cwd: '/' }],
      ['exec', { env: { LD_PRELOAD: '/tmp/evil.so' } }],
      ['sdcpp', { command: 'sd-server --port ${PORT}' }],
      ['sdcpp', { url: 'http://169.254.169.254/' }],
      ['comfyui', { workflow: '/etc/shadow' }],
      ['openai-images', { url: 'https://attacker.example', apiKeyEnv: 'GPUMESH_GRANT' }],
      ['onnx', { pipeline: 'tensors', process: 'agent' }],
    ];
    for (const [index, [engine, settings]] of attempts.entries()) {
      const added = await call('POST', '/v1/models', { name: `evil${index}`, file: `sha256:${'0'.repeat(64)}`, engine, types: ['image'], settings });
      expect(added.status, `${engine} ${JSON.stringify(settings)}: ${JSON.stringify(added.json)}`).toBe(403);
      expect(added.json.error.code).toBe('HOST_CONFIG_ONLY');
      expect(added.json.error.message).toMatch(/settings\.(command|url|cwd|env|workflow|apiKeyEnv|process)/);
      expect((await call('GET', `/v1/models/evil${index}`)).status).toBe(404);
    }
    expect(existsSync('/tmp/pwned')).toBe(false);
  });

  it('over the API a model may name a command model the hosts declare: it runs with the command of the host that declares it', async () => {
    const stored = await fetch(`${url}/v1/blobs`, { method: 'PUT', headers: { authorization: `Bearer ${admin}`, 'content-type': 'application/octet-stream' }, body: 'no weights: the command holds its own' });
    const { digest } = (await stored.json()) as { digest: string };
    const added = await call('POST', '/v1/models', { name: 'ref', file: digest, engine: 'exec', types: ['image'], settings: { batch: false, timeoutMs: 30_000 } });
    expect(added.status, JSON.stringify(added.json)).toBe(201);
    const job = await call('POST', '/v1/jobs', { type: 'image', model: 'ref', input: { prompt: 'by reference' } });
    expect(job.json.status, JSON.stringify(job.json.error)).toBe('succeeded');
    expect(job.json.result).toEqual({ ranBy: 'owned\'s host.yaml' });
    expect(job.json.attempts.map((attempt: { host: string }) => attempt.host)).toEqual(['owned']);
  });

  it('reads the deprecated jobTypes of a mesh.yaml model as its types, and the orchestrator\'s log names the field', () => {
    expect(serve.output()).toMatch(/models\.stamp\.jobTypes is a deprecated name, read as models\.stamp\.types/);
  });
});
