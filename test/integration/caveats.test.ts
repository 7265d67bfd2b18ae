import { once } from 'node:events';
import { importMacaroon } from 'macaroon';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import { CONDITIONS, CONDITIONS_BY_KIND, GRANT_KINDS, narrowGrant, type Condition, type GrantKind } from '../../src/orchestrator/auth/index.js';
import { LINK_PATH, LINK_PROTOCOL_VERSION, type OrchestratorMessage } from '../../src/protocol/index.js';
import { pinsOfGrant, ServerTrust } from '../../src/tls-client/pinning.js';
import { removeDir, startMesh, waitFor, type RunningMesh } from '../helpers/mesh.js';

/**
 * Every caveat a grant can carry, for every kind of grant, against a real `gpumesh up`: each condition a kind may
 * carry has a probe here — a request (a route or a link message) that the grant without the caveat may make and the
 * grant narrowed with it may not — and each condition a kind may not carry is refused at minting, by `grant narrow`,
 * and, hand-narrowed past both, by the orchestrator (401). A new condition, or one a kind may carry that restricts
 * nothing, fails the first test: the table must name a probe that it restricts.
 */
let mesh: RunningMesh;
/** A finished `gen` picture in the default album. */
let artifact: string;
/** The file of the built-in `gen` model (what an agent pulls). */
let genFile: string;

beforeAll(async () => {
  // A callback URL its jobs may name (port 9, discard: nothing answers, and the deliveries are retried in the background).
  mesh = await startMesh({ config: { webhooks: { allow: ['http://127.0.0.1:9/hooks/'], allowLoopback: true } } });
  const job = await call('POST', '/v1/jobs', mesh.admin, image('a caveat probe'));
  expect(job.status, JSON.stringify(job.json)).toBe(202);
  const done = await waitFor(async () => {
    const view = (await call('GET', `/v1/jobs/${job.json.id}`)).json;
    return view.status === 'succeeded' ? view : null;
  }, { timeoutMs: 60_000, what: 'the probe picture' });
  artifact = done.artifacts[0].digest;
  genFile = (await call('GET', '/v1/models')).json.models.find((model: { name: string }) => model.name === 'gen').digest;
}, 120_000);
afterAll(async () => {
  await mesh?.stop();
  if (mesh) removeDir(mesh.data);
});

interface Answer { status: number; json: any }

async function call(method: string, path: string, grant: string | null = mesh.admin, body?: unknown): Promise<Answer> {
  const headers: Record<string, string> = {};
  if (grant) headers.authorization = `Bearer ${grant}`;
  if (body !== undefined) headers['content-type'] = 'application/json';
  const response = await fetch(`${mesh.url}${path}`, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  const text = await response.text();
  let json: any = null;
  try { json = JSON.parse(text); } catch { /* not JSON */ }
  return { status: response.status, json };
}

const image = (prompt: string, extra: Record<string, unknown> = {}) => ({ type: 'image', input: { prompt, width: 8, height: 8, steps: 1 }, ...extra });

let hosts = 0;
/** A fresh base grant of the kind (agents: for a host of their own, serving `image`). */
async function base(kind: GrantKind): Promise<{ token: string; host: string }> {
  const host = `probe-${++hosts}`;
  const body = kind === 'agent' ? { kind, host, classes: ['image'] } : { kind };
  const minted = await call('POST', '/v1/grants', mesh.admin, body);
  expect(minted.status, JSON.stringify(minted.json)).toBe(201);
  return { token: minted.json.token, host };
}

/** A link opened with the grant, joining as `host`: the welcome, or how it was refused (HTTP status or close code). */
async function join(grant: string, host: string, classes = ['image']): Promise<{ outcome: 'welcome' | number; socket: WebSocket; inbox: OrchestratorMessage[] }> {
  const url = new URL(LINK_PATH, mesh.url);
  url.protocol = 'ws:';
  const socket = new WebSocket(url, { headers: { authorization: `Bearer ${grant}` } });
  const inbox: OrchestratorMessage[] = [];
  const outcome = await new Promise<'welcome' | number>((resolve) => {
    socket.on('unexpected-response', (_request, response) => resolve(response.statusCode ?? 0));
    socket.on('close', (code) => resolve(code));
    socket.on('message', (data) => {
      const message = JSON.parse(data.toString()) as OrchestratorMessage;
      inbox.push(message);
      if (message.type === 'welcome') resolve('welcome');
    });
    socket.on('open', () => socket.send(JSON.stringify({
      type: 'hello', protocol: LINK_PROTOCOL_VERSION, host, classes, engines: ['onnx'], models: [], inFlight: [], concurrency: 1, version: 'probe',
      devices: [{ id: 'gpu0', kind: 'gpu', name: 'probe', memoryTotalMB: 8192, budgetMB: 4096, usedMB: 0 }],
    })));
    socket.on('error', () => {});
  });
  return { outcome, socket, inbox };
}

async function leave(socket: WebSocket): Promise<void> {
  if (socket.readyState === WebSocket.CLOSED) return;
  // Refused at the upgrade: it never opened.
  if (socket.readyState === WebSocket.CONNECTING) return socket.terminate();
  const closed = once(socket, 'close');
  socket.close();
  await closed;
}

/** What the grant may do and the narrowed one may not: throws when the caveat restricts nothing. */
type Probe = (grant: string, narrowed: string, host: string) => Promise<void>;

const past = new Date(Date.now() - 60_000).toISOString();
const LINE: Record<Exclude<Condition, 'kind'>, (kind: GrantKind, host: string) => string> = {
  actions: (kind) => (kind === 'agent' ? 'actions blobs:read' : 'actions jobs:read'),
  types: () => 'types video',
  models: () => 'models mlp',
  classes: (kind) => (kind === 'agent' ? 'classes tensor' : 'classes nowhere'),
  hosts: () => 'hosts nowhere',
  albums: () => 'albums other',
  host: () => 'host nowhere',
  'time-before': () => `time-before ${past}`,
  'max-priority': () => 'max-priority 5',
  rate: () => 'rate 1/h',
  'tls-ca': () => `tls-ca sha256:${'ab'.repeat(32)}`,
  'max-queued': () => 'max-queued 0',
  'device-seconds-per-day': () => 'device-seconds-per-day 0',
  webhook: () => 'webhook http://127.0.0.1:9/hooks/grant',
};

/** The submit a job-carrying grant makes; `expect` the status the narrowed one gets. */
const submitProbe = (refusal: number, body: Record<string, unknown> = image('probe')): Probe => async (grant, narrowed) => {
  expect((await call('POST', '/v1/jobs', grant, body)).status).toBe(202);
  expect((await call('POST', '/v1/jobs', narrowed, body)).status).toBe(refusal);
};

const joinProbe = (classes?: string[]): Probe => async (grant, narrowed, host) => {
  const allowed = await join(grant, host, classes);
  expect(allowed.outcome).toBe('welcome');
  await leave(allowed.socket);
  const refused = await join(narrowed, host, classes);
  expect(refused.outcome).not.toBe('welcome');
  expect([401, 403, 4403]).toContain(refused.outcome);
  await leave(refused.socket);
};

/** A grant naming a TLS CA is never sent over plain http: the client refuses before anything leaves. */
const tlsProbe: Probe = async (grant, narrowed) => {
  expect((await new ServerTrust(mesh.url, pinsOfGrant(grant)).fetch(`${mesh.url}/healthz`)).status).toBe(200);
  await expect(new ServerTrust(mesh.url, pinsOfGrant(narrowed)).fetch(`${mesh.url}/healthz`)).rejects.toThrow(/plain http/);
};

const JOB_PROBES: Partial<Record<Condition, Probe>> = {
  types: submitProbe(403),
  // A job that names no album goes to the grant's own; one that names another is refused.
  albums: submitProbe(403, image('probe', { album: 'default' })),
  classes: submitProbe(403),
  'max-priority': submitProbe(403, image('urgent', { priority: 1 })),
  'time-before': submitProbe(401),
  models: async (grant, narrowed) => {
    await submitProbe(403)(grant, narrowed, '');
    expect((await call('GET', `/v1/blobs/${artifact}`, grant)).status).toBe(200);
    expect((await call('GET', `/v1/blobs/${artifact}`, narrowed)).status).toBe(404);
  },
  // A submit names no host: the job is taken, and the router passes over every host the grant does not name.
  hosts: async (grant, narrowed) => {
    expect((await call('POST', '/v1/jobs', grant, image('anywhere'))).status).toBe(202);
    const held = await call('POST', '/v1/jobs', narrowed, image('nowhere'));
    expect(held.status).toBe(202);
    const explained = await waitFor(async () => {
      const view = (await call('GET', `/v1/jobs/${held.json.id}/explain`)).json;
      return JSON.stringify(view).includes('host not granted') ? view : null;
    }, { what: 'the job to wait with "host not granted"' });
    expect(explained.status).toBe('queued');
    expect((await call('DELETE', `/v1/jobs/${held.json.id}`)).status).toBe(200);
  },
  rate: async (grant, narrowed) => {
    for (let i = 0; i < 2; i++) expect((await call('POST', '/v1/jobs', grant, image(`free ${i}`))).status).toBe(202);
    expect((await call('POST', '/v1/jobs', narrowed, image('first'))).status).toBe(202);
    expect((await call('POST', '/v1/jobs', narrowed, image('second'))).status).toBe(429);
  },
  'tls-ca': tlsProbe,
  // A cap of 0 refuses at once; caps above 0 are held to real use in test/integration/fair-share.test.ts.
  'max-queued': submitProbe(429),
  'device-seconds-per-day': submitProbe(429),
  // A job may name a callback URL the config allows; under a grant with its own, no other.
  webhook: submitProbe(403, image('probe', { webhook: 'http://127.0.0.1:9/hooks/job' })),
};

/**
 * `kind` is the minted caveat, not a narrowing: it bounds what a grant may do at all. Its probe is an action the kind
 * allows next to one it does not (for admin, the actions only admin grants have, which a client grant is refused).
 */
type KindProbe = (grant: string, host: string) => Promise<void>;
const KIND_PROBES: Record<GrantKind, KindProbe> = {
  admin: async (grant) => {
    expect((await call('GET', '/v1/grants?limit=1', grant)).status).toBe(200);
    expect((await call('GET', '/v1/grants?limit=1', (await base('client')).token)).status).toBe(403);
  },
  client: async (grant) => {
    expect((await call('POST', '/v1/jobs', grant, image('a client may'))).status).toBe(202);
    expect((await call('GET', '/v1/grants?limit=1', grant)).status).toBe(403);
  },
  agent: async (grant, host) => {
    const joined = await join(grant, host);
    expect(joined.outcome).toBe('welcome');
    await leave(joined.socket);
    expect((await call('POST', '/v1/jobs', grant, image('an agent may not'))).status).toBe(403);
  },
};

const PROBES: Record<GrantKind, Partial<Record<Exclude<Condition, 'kind'>, Probe>>> = {
  client: {
    ...JOB_PROBES,
    actions: submitProbe(403),
  },
  admin: {
    ...JOB_PROBES,
    actions: async (grant, narrowed) => {
      expect((await call('GET', '/v1/audit?limit=1', grant)).status).toBe(200);
      expect((await call('GET', '/v1/audit?limit=1', narrowed)).status).toBe(403);
    },
    host: joinProbe(),
  },
  agent: {
    actions: joinProbe(),
    host: joinProbe(),
    hosts: joinProbe(),
    classes: joinProbe(),
    'time-before': joinProbe(),
    'tls-ca': tlsProbe,
    // The host joins, and is sent nothing of the model: no run, no load, no manifest; it may not pull its file.
    models: async (grant, narrowed, host) => {
      expect((await call('GET', `/v1/blobs/${genFile}`, grant)).status).toBe(200);
      expect((await call('GET', `/v1/blobs/${genFile}`, narrowed)).status).toBe(404);
      const limited = await join(narrowed, host);
      expect(limited.outcome).toBe('welcome');
      limited.socket.send(JSON.stringify({ type: 'loaded', model: 'gen', digest: genFile, device: 'gpu0', memoryMB: 64 }));
      // Only this host may take the job: it waits there, and the router says why.
      const only = narrowGrant(mesh.admin, [`hosts ${host}`]);
      const held = await call('POST', '/v1/jobs', only, image('for the limited host only'));
      expect(held.status).toBe(202);
      const explained = await waitFor(async () => {
        const view = (await call('GET', `/v1/jobs/${held.json.id}/explain`)).json;
        return JSON.stringify(view).includes('model not granted') ? view : null;
      }, { what: 'the job to wait with "model not granted"' });
      expect(explained.status).toBe('queued');
      const hostView = (await call('GET', '/v1/hosts')).json.hosts.find((entry: { id: string }) => entry.id === host);
      expect(hostView.resident).toEqual([]);
      expect(limited.inbox.filter((message) => message.type === 'run' || message.type === 'load')).toEqual([]);
      expect((await call('DELETE', `/v1/jobs/${held.json.id}`)).status).toBe(200);
      await leave(limited.socket);
    },
  },
};

/** Add a caveat to a token the way anyone can, without `narrowGrant`'s check: what the orchestrator must catch. */
function handNarrowed(token: string, line: string): string {
  const macaroon = importMacaroon(JSON.parse(Buffer.from(token, 'base64url').toString('utf8')) as object);
  macaroon.addFirstPartyCaveat(line);
  return Buffer.from(JSON.stringify(macaroon.exportJSON())).toString('base64url');
}

const MINT_FIELD: Partial<Record<Condition, (kind: GrantKind) => Record<string, unknown>>> = {
  types: () => ({ types: ['video'] }), albums: () => ({ albums: ['other'] }), 'max-priority': () => ({ maxPriority: 5 }),
  rate: () => ({ rate: '1/h' }), host: () => ({ host: 'nowhere' }),
};

describe('every caveat restricts something, or cannot be carried', () => {
  it('the table names a probe for exactly the conditions each kind may carry, and every condition is in some kind\'s set', () => {
    for (const kind of GRANT_KINDS) {
      expect(['kind', ...Object.keys(PROBES[kind])].sort(), kind).toEqual([...CONDITIONS_BY_KIND[kind]].sort());
    }
    expect(new Set(GRANT_KINDS.flatMap((kind) => [...CONDITIONS_BY_KIND[kind]]))).toEqual(new Set(CONDITIONS));
  });

  for (const kind of GRANT_KINDS) {
    for (const condition of CONDITIONS) {
      if (!CONDITIONS_BY_KIND[kind].has(condition)) continue;
      it(`${kind} × ${condition}: the caveat refuses what the grant without it allows`, async () => {
        const { token, host } = await base(kind);
        if (condition === 'kind') return KIND_PROBES[kind](token, host);
        const line = LINE[condition](kind, host);
        await PROBES[kind][condition]!(token, narrowGrant(token, [line]), host);
      }, 60_000);
    }
  }

  for (const kind of GRANT_KINDS) {
    const outOfScope = CONDITIONS.filter((condition) => !CONDITIONS_BY_KIND[kind].has(condition));
    if (outOfScope.length === 0) continue;
    it(`${kind}: ${outOfScope.join(', ')} would restrict nothing, so they are refused when minted, narrowed, or forged past both`, async () => {
      const { token, host } = await base(kind);
      for (const condition of outOfScope) {
        const field = MINT_FIELD[condition];
        if (field) {
          const minted = await call('POST', '/v1/grants', mesh.admin, { kind, ...(kind === 'agent' ? { host } : {}), ...field(kind) });
          expect(minted.status, `${kind} ${condition}: ${JSON.stringify(minted.json)}`).toBe(400);
          expect(minted.json.error.message).toMatch(/would restrict nothing on an? \w+ grant/);
        }
        const line = LINE[condition as Exclude<Condition, 'kind'>](kind, host);
        expect(() => narrowGrant(token, [line]), `${kind} ${condition}`).toThrow(/would restrict nothing/);
        const forged = handNarrowed(token, line);
        const answer = kind === 'agent' ? await call('GET', `/v1/blobs/${genFile}`, forged) : await call('GET', '/v1/jobs', forged);
        expect(answer.status, `${kind} ${condition}`).toBe(401);
        expect(answer.json.error).toMatchObject({ code: 'GRANT_INVALID', message: expect.stringMatching(/would restrict nothing/) });
      }
    });
  }
});
