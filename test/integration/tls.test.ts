import { X509Certificate } from 'node:crypto';
import { once } from 'node:events';
import { existsSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import https from 'node:https';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import tls from 'node:tls';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MeshClient } from '../../src/cli/common/client.js';
import { narrowGrant } from '../../src/orchestrator/auth/index.js';
import { certificateFingerprint, TLS_CA_PATH } from '../../src/tls-client/index.js';
import { removeDir, startMesh, tempDir, waitFor } from '../helpers/mesh.js';
import { gpumesh, gpumeshRun, type Proc } from '../helpers/processes.js';

const data = tempDir('gpumesh-tls-');
const out = tempDir('gpumesh-tls-out-');
/** A home with no mesh in it: commands run there learn what to pin only from their grant. */
const elsewhere = tempDir('gpumesh-tls-elsewhere-');
const NAMES = ['--tls-name', 'nas.lan', '--tls-name', '203.0.113.5'];
const WRONG = `sha256:${'ab'.repeat(32)}`;
const started: Proc[] = [];

let serve: Proc;
let url: string;
let fingerprint: string;
let admin: string;
let agentGrant: string;
let clientGrant: string;

const tlsFile = (name: string): string => join(data, 'tls', name);

/** `gpumesh serve --tls` on a free port (or the one it had, for a restart); resolves once it logs its https URL. */
async function startServe(extra: string[] = [], port = '0'): Promise<void> {
  serve = gpumesh(['serve', '--tls', '--data', data, '--port', port, ...NAMES, ...extra]);
  started.push(serve);
  url = await waitFor(() => {
    if (serve.child.exitCode !== null) throw new Error(`gpumesh serve exited:\n${serve.output()}`);
    return /"url":"(https:[^"]+)".*"msg":"orchestrator listening"/.exec(serve.output())?.[1];
  }, { timeoutMs: 30_000, what: 'gpumesh serve --tls to listen' });
}

async function hosts(): Promise<string[]> {
  const status = await new MeshClient(url, admin).request<{ hosts: { id: string }[] }>('GET', '/v1/status');
  return status.hosts.map((host) => host.id);
}

/**
 * An HTTPS server with the orchestrator's own certificate in front of it, recording every request
 * before passing it on: it sees exactly what a client sends "the server".
 */
async function recordingFront(): Promise<{ url: string; seen: { url: string; authorization?: string }[]; close(): Promise<void> }> {
  const seen: { url: string; authorization?: string }[] = [];
  const ca = readFileSync(tlsFile('ca.crt'), 'utf8');
  const front = https.createServer({ key: readFileSync(tlsFile('server.key')), cert: readFileSync(tlsFile('server.crt')) }, (request, response) => {
    seen.push({ url: request.url!, authorization: request.headers.authorization });
    const upstream = https.request(new URL(request.url!, url), { method: request.method, headers: request.headers, ca }, (answer) => {
      response.writeHead(answer.statusCode!, answer.headers);
      answer.pipe(response);
    });
    upstream.on('error', (error) => response.destroy(error));
    request.pipe(upstream);
  });
  front.on('upgrade', (request, socket) => {
    seen.push({ url: request.url!, authorization: request.headers.authorization });
    socket.destroy();
  });
  front.listen(0, '127.0.0.1');
  await once(front, 'listening');
  return {
    url: `https://127.0.0.1:${(front.address() as AddressInfo).port}`,
    seen,
    async close() {
      front.closeAllConnections();
      front.close();
      await once(front, 'close');
    },
  };
}

beforeAll(async () => {
  // Every output is uploaded (none rides inline in the agent's report), so uploads cross TLS too.
  writeFileSync(join(data, 'mesh.yaml'), 'agents:\n  inlineOutputBytes: 0\n');
  await startServe();
  fingerprint = certificateFingerprint(readFileSync(tlsFile('ca.crt'), 'utf8'));
  admin = readFileSync(join(data, 'admin.grant'), 'utf8').trim();
});
afterAll(async () => {
  for (const proc of started.reverse()) await proc.kill();
  for (const dir of [data, out, elsewhere]) removeDir(dir);
});

describe('gpumesh serve --tls', () => {
  it('makes a private CA and a server certificate for every name, with its keys at mode 0600, and serves HTTPS', async () => {
    expect(url).toMatch(/^https:\/\/127\.0\.0\.1:\d+$/);
    expect(statSync(join(data, 'tls')).mode & 0o777).toBe(0o700);
    for (const key of ['ca.key', 'server.key']) expect(statSync(tlsFile(key)).mode & 0o777, key).toBe(0o600);
    expect(serve.output()).toContain(`"tlsCaFingerprint":"${fingerprint}"`);
    const ca = readFileSync(tlsFile('ca.crt'), 'utf8');

    // A real handshake that trusts only the mesh's CA; then Node's own name check for every name.
    const socket = tls.connect({ host: '127.0.0.1', port: Number(new URL(url).port), ca });
    await once(socket, 'secureConnect');
    expect(socket.authorized).toBe(true);
    const peer = socket.getPeerCertificate();
    socket.destroy();
    for (const name of ['localhost', '127.0.0.1', '::1', 'nas.lan', '203.0.113.5']) expect(tls.checkServerIdentity(name, peer), name).toBeUndefined();
    expect(tls.checkServerIdentity('elsewhere.lan', peer)).toBeInstanceOf(Error);
    expect(new X509Certificate(readFileSync(tlsFile('server.crt'))).checkIssued(new X509Certificate(ca))).toBe(true);

    // The CA certificate is public: served without a grant.
    const served = await new Promise<string>((resolve, reject) => {
      https.get(new URL(TLS_CA_PATH, url), { ca }, (response) => {
        let text = '';
        response.on('data', (chunk: Buffer) => (text += chunk.toString()));
        response.on('end', () => resolve(text));
      }).on('error', reject);
    });
    expect(served).toBe(ca);
    const openapi = await new MeshClient(url, admin).request<{ paths: Record<string, { get: { security?: unknown[] } }> }>('GET', '/openapi.json');
    expect(openapi.paths[TLS_CA_PATH]?.get.security).toEqual([]);
  });

  it('grants name the CA; an agent joins over wss with its join grant and a job submitted with a client grant runs end to end', async () => {
    const agentMinted = await gpumeshRun(['grant', 'create', '--agent', '--host', 'tls-host', '--classes', 'image', '--json'], { GPUMESH_HOME: data });
    expect(agentMinted.code, agentMinted.output).toBe(0);
    const minted = JSON.parse(agentMinted.output) as { token: string; caveats: string[] };
    expect(minted.caveats).toEqual(['kind agent', 'classes image', 'host tls-host', `tls-ca ${fingerprint}`]);
    agentGrant = minted.token;
    const clientMinted = await gpumeshRun(['grant', 'create', '--types', 'image', '--expires', '1h'], { GPUMESH_HOME: data });
    expect(clientMinted.code, clientMinted.output).toBe(0);
    clientGrant = clientMinted.output.trim();
    const inspected = await gpumeshRun(['grant', 'inspect', clientGrant]);
    expect(JSON.parse(inspected.output).caveats).toContain(`tls-ca ${fingerprint}`);

    const agent = gpumesh(['agent', '--url', url, '--host', 'tls-host', '--classes', 'image', '--data', join(data, 'agent')], { GPUMESH_GRANT: agentGrant, GPUMESH_HOME: elsewhere });
    started.push(agent);
    await waitFor(async () => (await hosts()).includes('tls-host'), { timeoutMs: 30_000, what: `the agent to join:\n${agent.output()}` });

    // From a folder with no mesh in it, so the only thing that says what to pin is the grant.
    const submitted = await gpumeshRun(['submit', '--type', 'image', '--prompt', 'a lighthouse over TLS', '--size', '64x64', '--steps', '2',
      '--wait', '--out', out, '--url', url, '--grant', clientGrant], { GPUMESH_HOME: elsewhere });
    expect(submitted.code, submitted.output).toBe(0);
    expect(submitted.output).toMatch(/succeeded/);
    expect(/url\s+(\S+)/.exec(submitted.output)?.[1]).toMatch(new RegExp(`^${url}/v1/blobs/sha256:[0-9a-f]{64}$`));
    const file = /file\s+(\S+)/.exec(submitted.output)?.[1];
    expect(file && existsSync(file) && statSync(file).size > 0).toBe(true);
    expect(agent.output()).toContain('linked to the orchestrator');
  });

  it('a grant with a wrong fingerprint: the CLI and the agent refuse, naming both, and the server never sees the grant', async () => {
    const front = await recordingFront();
    try {
      // Control: through the front, a right grant arrives (so the front would have seen a wrong one).
      const control = await gpumeshRun(['status', '--url', front.url, '--grant', clientGrant], { GPUMESH_HOME: elsewhere });
      expect(control.code, control.output).toBe(0);
      expect(front.seen.some((request) => request.authorization === `Bearer ${clientGrant}`)).toBe(true);
      front.seen.length = 0;

      const wrongClient = narrowGrant(clientGrant, [`tls-ca ${WRONG}`]);
      const cli = await gpumeshRun(['status', '--url', front.url, '--grant', wrongClient], { GPUMESH_HOME: elsewhere });
      expect(cli.code).toBe(1);
      expect(cli.output).toContain(`the server's CA is ${fingerprint}, but the pinned CA is ${WRONG} (from the grant)`);
      expect(cli.output).toContain('no grant was sent');
      expect(cli.output).not.toContain('    at ');

      const wrongAgent = narrowGrant(agentGrant, [`tls-ca ${WRONG}`]);
      const agent = gpumesh(['agent', '--url', front.url, '--host', 'tls-host', '--classes', 'image', '--data', join(data, 'wrong-agent')], { GPUMESH_GRANT: wrongAgent, GPUMESH_HOME: elsewhere });
      started.push(agent);
      expect(await agent.exited()).toBe(2);
      expect(agent.output()).toContain(`the server's CA is ${fingerprint}, but the pinned CA is ${WRONG} (from the grant)`);

      // All that reached "the server": the CA fetches, with no grant.
      expect(front.seen.length).toBeGreaterThan(0);
      expect(front.seen).toEqual(front.seen.map(() => ({ url: TLS_CA_PATH, authorization: undefined })));
    } finally {
      await front.close();
    }

    // A flag that names another CA is refused the same way, straight at the orchestrator; nothing joins.
    const agentGrantOfOther = (await gpumeshRun(['grant', 'create', '--agent', '--host', 'other-host', '--classes', 'image'], { GPUMESH_HOME: data })).output.trim();
    const flagged = gpumesh(['agent', '--url', url, '--host', 'other-host', '--classes', 'image', '--data', join(data, 'flagged-agent'),
      '--tls-ca-fingerprint', WRONG.replace('sha256:', '').toUpperCase()], { GPUMESH_GRANT: agentGrantOfOther, GPUMESH_HOME: elsewhere });
    started.push(flagged);
    expect(await flagged.exited()).toBe(2);
    expect(flagged.output()).toContain(`${WRONG} (from --tls-ca-fingerprint)`);
    expect(await hosts()).not.toContain('other-host');
  });

  it('a restart keeps the CA (grants stay valid); a new name re-issues the certificate from the same CA', async () => {
    const ca = readFileSync(tlsFile('ca.crt'), 'utf8');
    const certificate = readFileSync(tlsFile('server.crt'), 'utf8');

    // The same port, as a service restarts, so the agent that is still running finds it again.
    const port = new URL(url).port;
    await serve.kill();
    await startServe([], port);
    expect(readFileSync(tlsFile('ca.crt'), 'utf8')).toBe(ca);
    expect(readFileSync(tlsFile('server.crt'), 'utf8')).toBe(certificate);
    expect(serve.output()).not.toContain('issued the server certificate');
    const again = await gpumeshRun(['status', '--url', url, '--grant', clientGrant], { GPUMESH_HOME: elsewhere });
    expect(again.code, again.output).toBe(0);

    await serve.kill();
    await startServe(['--tls-name', 'gpu.example.org'], port);
    expect(readFileSync(tlsFile('ca.crt'), 'utf8')).toBe(ca);
    const reissued = readFileSync(tlsFile('server.crt'), 'utf8');
    expect(reissued).not.toBe(certificate);
    expect(serve.output()).toContain('"reason":"the names changed"');
    expect(new X509Certificate(reissued).checkHost('gpu.example.org')).toBe('gpu.example.org');
    expect(statSync(tlsFile('server.key')).mode & 0o777).toBe(0o600);
    // The agent redials on its own and pins the same CA.
    await waitFor(async () => (await hosts()).includes('tls-host'), { timeoutMs: 30_000, what: 'the agent to rejoin after the restart' });
    const after = await gpumeshRun(['status', '--url', url, '--grant', clientGrant], { GPUMESH_HOME: elsewhere });
    expect(after.code, after.output).toBe(0);
    expect(after.output).toContain('tls-host');
  });
});

describe('gpumesh up --tls', () => {
  it('runs its local agent (in its own process: over wss), prints an https gallery URL and the CA fingerprint', async () => {
    const mesh = await startMesh({ args: ['--tls', '--agent-process'] });
    try {
      expect(mesh.galleryUrl).toMatch(/^https:\/\/127\.0\.0\.1:\d+\/#grant=/);
      const meshFingerprint = certificateFingerprint(readFileSync(join(mesh.data, 'tls', 'ca.crt'), 'utf8'));
      expect(mesh.output()).toContain(`private CA ${meshFingerprint}`);
      const client = mesh.client();
      expect(await client.trustedCa()).toBe(readFileSync(join(mesh.data, 'tls', 'ca.crt'), 'utf8'));
      const status = await client.request<{ hosts: unknown[] }>('GET', '/v1/status');
      expect(status.hosts).toHaveLength(1);
    } finally {
      await mesh.stop();
      removeDir(mesh.data);
    }
  });
});
