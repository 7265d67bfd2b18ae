import { createHash, randomBytes, randomUUID } from 'node:crypto';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { stringify } from 'yaml';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import { narrowGrant } from '../../src/orchestrator/auth/index.js';
import { startKnobStandIn, type StandIn } from '../helpers/knob-standins.js';
import { removeDir, ROOT, startMesh, tempDir, TSX_LOADER, waitFor } from '../helpers/mesh.js';
import { gpumesh, startServe, type Proc } from '../helpers/processes.js';

/**
 * The ComfyUI pass-through (docs/api.md, "ComfyUI pass-through"), end to end over real sockets: a `gpumesh serve`, an
 * agent `studio` joined to it over a real WebSocket link, whose own host.yaml opens two ComfyUI models to clients
 * (`passthrough: true`) — one fronting the ComfyUI stand-in, one a stand-in the agent starts itself — and keeps a third
 * closed. A client that talks as Krita's AI Diffusion plugin does reaches the host's ComfyUI through
 * `/comfyui/studio/<model>/…`: what it sends and what it gets back are ComfyUI's, byte for byte, the grant is checked
 * first and never reaches ComfyUI. The link's frames are kept small (agents.link.maxFrameBytes 64 KiB), so bodies and
 * WebSocket messages cross it in many pieces.
 */
const STANDIN = join(ROOT, 'test/fixtures/standins/comfyui-standin.ts');
const TXT2IMG = JSON.parse(readFileSync(join(ROOT, 'test/fixtures/comfyui/txt2img-api.json'), 'utf8')) as Record<string, { class_type: string; inputs: Record<string, unknown> }>;
const data = tempDir('gpumesh-passthrough-');
const processes: Proc[] = [];
let comfy: StandIn;
let agent: Proc;
let url: string;
let serve: Proc;
/** A client grant that may submit jobs (any model, any host). */
let client: string;

const sha256 = (bytes: Uint8Array): string => createHash('sha256').update(bytes).digest('hex');
const wsUrl = (path: string): string => `${url.replace(/^http/, 'ws')}${path}`;

async function call(method: string, path: string, options: { grant?: string | null; body?: BodyInit; headers?: Record<string, string> } = {}): Promise<{ status: number; json: any; bytes: Buffer; headers: Headers }> {
  const grant = options.grant === undefined ? client : options.grant;
  const response = await fetch(`${url}${path}`, {
    method, body: options.body, headers: { ...(grant ? { authorization: `Bearer ${grant}` } : {}), ...options.headers },
    ...(options.body instanceof ReadableStream ? { duplex: 'half' } : {}),
  } as RequestInit);
  const bytes = Buffer.from(await response.arrayBuffer());
  let json: any = null;
  try { json = JSON.parse(bytes.toString()); } catch { /* not JSON */ }
  return { status: response.status, json, bytes, headers: response.headers };
}

/** A WebSocket to the mesh that records what arrives (JSON text parsed, binary as bytes) and how it closed. */
function openSocket(path: string, grant: string | null = client): Promise<{ socket: WebSocket; messages: (Record<string, any> | Buffer)[]; closed: Promise<{ code: number; reason: string }> }> {
  const socket = new WebSocket(wsUrl(path), { headers: grant ? { authorization: `Bearer ${grant}` } : {} });
  const messages: (Record<string, any> | Buffer)[] = [];
  socket.on('message', (data: Buffer, binary) => messages.push(binary ? data : JSON.parse(data.toString()) as Record<string, any>));
  const closed = new Promise<{ code: number; reason: string }>((resolve) => socket.on('close', (code, reason) => resolve({ code, reason: reason.toString() })));
  return new Promise((resolve, reject) => {
    socket.once('open', () => resolve({ socket, messages, closed }));
    socket.once('unexpected-response', (_request, response) => {
      let body = '';
      response.on('data', (chunk: Buffer) => (body += chunk.toString()));
      response.on('end', () => reject(Object.assign(new Error(`upgrade refused: ${response.statusCode} ${body}`), { status: response.statusCode, body })));
    });
    socket.once('error', (error) => reject(error));
  });
}

/** Peak resident memory of a process so far (VmHWM, MB). */
const peakMB = (pid: number): number => Number(/VmHWM:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))![1]) / 1024;

beforeAll(async () => {
  comfy = await startKnobStandIn('comfyui');
  const model = { engine: 'comfyui', types: ['image'], memoryMB: 16, settings: { workflow: TXT2IMG, inputs: { prompt: { node: '6', field: 'text' } } } };
  writeFileSync(join(data, 'mesh.yaml'), stringify({
    agents: { link: { maxFrameBytes: 65536, relays: { windowBytes: 131072, idleMs: 20_000 } } },
    // `comfy` is only passed through (Krita brings its own workflows): it needs no workflow.
    models: { comfy: { engine: 'comfyui', types: ['image'], memoryMB: 16 }, 'comfy-closed': model, 'comfy-managed': model },
  }));
  const served = await startServe(data);
  serve = served.proc;
  processes.push(serve);
  url = served.url;
  const mint = async (body: Record<string, unknown>): Promise<string> => {
    const response = await fetch(`${url}/v1/grants`, { method: 'POST', headers: { authorization: `Bearer ${served.admin}`, 'content-type': 'application/json' }, body: JSON.stringify(body) });
    return ((await response.json()) as { token: string }).token;
  };
  client = await mint({ kind: 'client', note: 'a Krita user' });
  const dir = join(data, 'studio');
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, 'host.yaml'), stringify({
    models: {
      comfy: { settings: { url: comfy.url, passthrough: true } },
      'comfy-closed': { settings: { url: comfy.url } },
      'comfy-managed': {
        settings: {
          command: `'${process.execPath}' --import ${TSX_LOADER} '${STANDIN}' --port \${PORT}`,
          readiness: { http: '/system_stats', timeoutMs: 60_000, intervalMs: 100 }, idleStopMs: 1500, passthrough: true,
        },
      },
    },
  }));
  agent = gpumesh(['agent', '--join', url, '--grant', await mint({ kind: 'agent', host: 'studio', classes: ['image'] }), '--data', dir]);
  processes.push(agent);
  await waitFor(async () => (await call('GET', '/v1/hosts', { grant: served.admin })).json?.hosts?.some((host: { id: string; connected: boolean }) => host.id === 'studio' && host.connected), { timeoutMs: 30_000, what: 'studio to join' });
}, 120_000);

afterAll(async () => {
  for (const proc of processes.reverse()) await proc.kill();
  await comfy?.stop();
  removeDir(data);
});

describe('a client reaches one host\'s ComfyUI through the orchestrator', () => {
  it('Krita\'s flow: system_stats, a /ws probe without credentials, object_info, a custom pack\'s route, its prompt with its own id, events and previews over the relayed WebSocket, history and view', async () => {
    const base = '/comfyui/studio/comfy';
    const stats = await call('GET', `${base}/system_stats`);
    expect(stats.status).toBe(200);
    expect(stats.json).toMatchObject({ system: { comfyui_version: 'comfyui-standin' }, devices: [expect.objectContaining({ type: 'cpu' })] });
    // What ComfyUI serves never runs as a page of the orchestrator's origin.
    expect(stats.headers.get('content-security-policy')).toBe("default-src 'none'; sandbox");

    // Krita's probe carries no token: it opens, and is closed at once with nothing relayed.
    const sockets = (await comfy.state<{ sockets: number }>()).sockets;
    const probe = await openSocket(`${base}/ws?clientId=${randomUUID()}`, null);
    expect(await probe.closed).toMatchObject({ code: 1008 });
    expect(probe.messages).toEqual([]);
    expect((await comfy.state<{ sockets: number }>()).sockets).toBe(sockets);

    const info = await call('GET', `${base}/object_info`);
    expect(Object.keys(info.json)).toEqual(expect.arrayContaining(['KSampler', 'CheckpointLoaderSimple', 'SaveImage']));
    expect((await call('GET', `${base}/api/standin-tools/model_info/checkpoints`)).json).toEqual({ 'standin-v1.safetensors': expect.objectContaining({ base_model: 'sd15' }) });

    const clientId = randomUUID();
    const listener = await openSocket(`${base}/ws?clientId=${clientId}`);
    await waitFor(() => listener.messages.some((message) => !Buffer.isBuffer(message) && message.type === 'status'), { what: 'the status message' });
    expect(listener.messages[0]).toMatchObject({ type: 'status', data: { sid: clientId } });

    const promptId = randomUUID();
    const workflow = { ...TXT2IMG, 3: { ...TXT2IMG['3']!, inputs: { ...TXT2IMG['3']!.inputs, steps: 6, seed: 11 } }, 5: { ...TXT2IMG['5']!, inputs: { width: 64, height: 64, batch_size: 1 } } };
    const submitted = await call('POST', `${base}/prompt`, { body: JSON.stringify({ prompt: workflow, client_id: clientId, prompt_id: promptId }), headers: { 'content-type': 'application/json' } });
    expect(submitted.status).toBe(200);
    expect(submitted.json).toMatchObject({ prompt_id: promptId });
    const json = () => listener.messages.filter((message): message is Record<string, any> => !Buffer.isBuffer(message));
    await waitFor(() => json().some((message) => message.type === 'executing' && message.data.node === null && message.data.prompt_id === promptId), { what: 'the prompt to finish' });
    const types = json().filter((message) => message.data?.prompt_id === promptId).map((message) => message.type);
    expect(types).toEqual(expect.arrayContaining(['execution_start', 'executing', 'progress', 'executed', 'execution_success']));
    expect(types.indexOf('execution_start')).toBeLessThan(types.indexOf('executed'));

    // Binary previews: as ComfyUI sent them, byte for byte and in order.
    const previews = listener.messages.filter((message): message is Buffer => Buffer.isBuffer(message)).map((frame) => frame.toString('base64'));
    expect(previews.length).toBeGreaterThanOrEqual(2);
    const sent = (await comfy.state<{ previews: string[] }>()).previews;
    expect(sent.slice(-previews.length)).toEqual(previews);
    expect(Buffer.from(previews[0]!, 'base64').readUInt32BE(0)).toBe(1); // PREVIEW_IMAGE

    const history = await call('GET', `${base}/history/${promptId}`);
    const image = (history.json[promptId].outputs['9'].images as { filename: string; subfolder: string; type: string }[])[0]!;
    const query = new URLSearchParams({ filename: image.filename, subfolder: image.subfolder, type: image.type });
    const viewed = await call('GET', `${base}/view?${query}`);
    expect(viewed.status).toBe(200);
    expect(viewed.headers.get('content-type')).toBe('image/png');
    expect(sha256(viewed.bytes)).toBe(sha256(Buffer.from(await (await fetch(`${comfy.url}/view?${query}`)).arrayBuffer())));

    // A WebSocket message larger than the link's frames, in pieces over the link and whole to the client.
    const big = await call('POST', `${base}/api/standin-tools/send`, { body: JSON.stringify({ clientId, bytes: 300_000 }), headers: { 'content-type': 'application/json' } });
    expect(big.json.sockets).toBe(1);
    await waitFor(() => listener.messages.some((message) => Buffer.isBuffer(message) && message.length === 300_000), { what: 'the large message' });
    expect(sha256(listener.messages.find((message): message is Buffer => Buffer.isBuffer(message) && message.length === 300_000)!)).toBe(big.json.sha256);

    listener.socket.close(1000);
    expect((await listener.closed).code).toBe(1000);
    // The grant stayed with the mesh: ComfyUI never saw an Authorization header.
    expect((await comfy.state<{ authorized: number }>()).authorized).toBe(0);
    expect(await (await fetch(`${url}/metrics`, { headers: { authorization: `Bearer ${readFileSync(join(data, 'admin.grant'), 'utf8').trim()}` } })).text())
      .toMatch(/gpumesh_passthrough_relays_total\{host="studio",model="comfy",kind="ws",outcome="client-gone"\} [1-9]/);
  });

  it('a large upload and download stream through both hops in pieces, each process holding a window of it, not the whole', async () => {
    const base = '/comfyui/studio/comfy';
    // Larger than what a process's young generation may hold as garbage between two scavenges (V8's semi-spaces,
    // 2 × 32 MB: bin/gpumesh.js, NODE_FLAGS), so that a body held whole cannot pass for the garbage of one streamed.
    const size = 160 * 1024 * 1024;
    const payload = randomBytes(size);
    const before = { orchestrator: peakMB(serve.child.pid!), agent: peakMB(agent.child.pid!) };
    let sent = 0;
    // Streamed from the client in 1 MiB pieces, as a file upload would be.
    const body = new ReadableStream<Uint8Array>({
      pull(controller) {
        if (sent >= size) return controller.close();
        controller.enqueue(payload.subarray(sent, sent + 1024 * 1024));
        sent += 1024 * 1024;
      },
    });
    const put = await call('PUT', `${base}/api/standin-tools/image/big`, { body, headers: { 'content-type': 'application/octet-stream', 'content-length': String(size) } });
    expect(put.status).toBe(201);
    expect(put.json).toEqual({ id: 'big', bytes: size, sha256: sha256(payload) });
    const got = await call('GET', `${base}/api/standin-tools/image/big`);
    expect(got.status).toBe(200);
    expect(got.bytes.length).toBe(size);
    expect(sha256(got.bytes)).toBe(sha256(payload));
    // 160 MB each way, of which either process held a window at a time and the garbage of the pieces passed (about 60
    // MB at most, whatever the size: 58 MB for 48 MB, 61 for 160; 6 with a 4 MB young generation); a body held whole
    // would be ≥ 160 MB more.
    expect(peakMB(serve.child.pid!) - before.orchestrator).toBeLessThan(96);
    expect(peakMB(agent.child.pid!) - before.agent).toBeLessThan(96);
  });

  it('a ComfyUI the agent starts is started by the first request and kept while a WebSocket is open, then scaled to zero', async () => {
    const base = '/comfyui/studio/comfy-managed';
    const resident = async (): Promise<boolean> => {
      const hosts = (await call('GET', '/v1/hosts', { grant: readFileSync(join(data, 'admin.grant'), 'utf8').trim() })).json.hosts as { id: string; resident: { model: string }[] }[];
      return hosts.find((host) => host.id === 'studio')!.resident.some((entry) => entry.model === 'comfy-managed');
    };
    const stats = await call('GET', `${base}/system_stats`);
    expect(stats.status).toBe(200);
    expect(stats.json.system.comfyui_version).toBe('comfyui-standin');
    const listener = await openSocket(`${base}/ws?clientId=${randomUUID()}`);
    await waitFor(() => listener.messages.length > 0, { what: 'the managed ComfyUI\'s status message' });
    // Well past its idleStopMs (1.5 s): held by the open socket.
    await new Promise((resolve) => setTimeout(resolve, 4000));
    expect(await resident()).toBe(true);
    expect((await call('GET', `${base}/queue`)).json).toEqual({ queue_running: [], queue_pending: [] });
    listener.socket.close(1000);
    await listener.closed;
    await waitFor(async () => !(await resident()), { timeoutMs: 15_000, what: 'the managed ComfyUI to be stopped once idle' });
  });
});

describe('what the pass-through refuses', () => {
  it('a model its host\'s owner did not open, an unknown host or model, a model that is not ComfyUI: 404 naming it', async () => {
    // What the host opened is shown with it.
    const hosts = (await call('GET', '/v1/hosts', { grant: readFileSync(join(data, 'admin.grant'), 'utf8').trim() })).json.hosts as { id: string; passthrough: string[] }[];
    expect(hosts.find((host) => host.id === 'studio')!.passthrough).toEqual(['comfy', 'comfy-managed']);
    const closed = await call('GET', '/comfyui/studio/comfy-closed/system_stats');
    expect(closed.status).toBe(404);
    expect(closed.json.error.code).toBe('PASSTHROUGH_NOT_FOUND');
    expect(closed.json.error.message).toContain('studio/comfy-closed');
    expect(closed.json.error.message).toContain('passthrough: true');
    expect((await call('GET', '/comfyui/nowhere/comfy/system_stats')).json.error.message).toContain('no host "nowhere"');
    expect((await call('GET', '/comfyui/studio/nothing/system_stats')).json.error.message).toContain('no model "nothing"');
    expect((await call('GET', '/comfyui/studio/gen/system_stats')).json.error.message).toContain('only ComfyUI models');
    await expect(openSocket('/comfyui/studio/comfy-closed/ws?clientId=x')).rejects.toMatchObject({ status: 404 });
    // A model only passed through runs no jobs, and says why.
    const job = await call('POST', '/v1/jobs', { body: JSON.stringify({ type: 'image', model: 'comfy', input: { prompt: 'x' } }), headers: { 'content-type': 'application/json', prefer: 'wait=30' } });
    expect(job.json).toMatchObject({ status: 'failed', error: { code: 'ENGINE_FAILED', message: expect.stringContaining('only passed through') } });
    expect((await comfy.state<{ requests: string[] }>()).requests.filter((route) => route.includes('nothing'))).toEqual([]);
  });

  it('a grant that may not submit to the model is 403; no grant is 401; neither reaches ComfyUI, and a grant as Basic\'s password does', async () => {
    const requests = (await comfy.state<{ requests: string[] }>()).requests.length;
    const readOnly = narrowGrant(client, ['actions jobs:read']);
    const otherModel = narrowGrant(client, ['models gen']);
    const otherHost = narrowGrant(client, ['hosts elsewhere']);
    const tensors = narrowGrant(client, ['types tensor']);
    for (const grant of [readOnly, otherModel, otherHost, tensors]) {
      const refused = await call('POST', '/comfyui/studio/comfy/prompt', { grant, body: '{}', headers: { 'content-type': 'application/json' } });
      expect(refused.status).toBe(403);
      expect(refused.json.error.code).toBe('GRANT_DENIED');
    }
    const none = await call('GET', '/comfyui/studio/comfy/system_stats', { grant: null });
    expect(none.status).toBe(401);
    expect(none.json.error.code).toBe('GRANT_MISSING');
    expect(none.headers.get('www-authenticate')).toMatch(/^Basic/);
    // A client that sends credentials only as HTTP Basic passes the grant as its password.
    const basic = await call('GET', '/comfyui/studio/comfy/system_stats', { grant: null, headers: { authorization: `Basic ${Buffer.from(`krita:${client}`).toString('base64')}` } });
    expect(basic.status).toBe(200);
    // A grant for ComfyUI's workflows (the ComfyUI door's jobs) may use the pass-through as one for pictures may.
    expect((await call('GET', '/comfyui/studio/comfy/queue', { grant: narrowGrant(client, ['types workflow', 'models comfy', 'hosts studio']) })).status).toBe(200);
    expect((await comfy.state<{ authorized: number }>()).authorized).toBe(0);
    await expect(openSocket('/comfyui/studio/comfy/ws?clientId=x', otherModel)).rejects.toMatchObject({ status: 403 });
    await expect(openSocket('/comfyui/studio/comfy/ws?clientId=x', 'not-a-grant')).rejects.toMatchObject({ status: 401 });
    expect((await comfy.state<{ requests: string[] }>()).requests.length).toBe(requests + 2); // the Basic one, the workflow grant's
  });
});

describe('when the client goes', () => {
  it('a client that hangs up before ComfyUI answers ends its relay: nothing is left open', async () => {
    const admin = readFileSync(join(data, 'admin.grant'), 'utf8').trim();
    const open = async (): Promise<string | undefined> => /gpumesh_passthrough_relays_open\{host="studio",kind="http"\} (\d+)/.exec(
      await (await fetch(`${url}/metrics`, { headers: { authorization: `Bearer ${admin}` } })).text())?.[1];
    const controller = new AbortController();
    const slow = fetch(`${url}/comfyui/studio/comfy/api/standin-tools/slow?ms=4000`, { headers: { authorization: `Bearer ${client}` }, signal: controller.signal }).catch((error: unknown) => error);
    await waitFor(async () => (await open()) === '1', { what: 'the relay to open' });
    controller.abort();
    expect(await slow).toBeInstanceOf(Error);
    await waitFor(async () => (await open()) === '0', { what: 'the relay to end' });
    expect((await fetch(`${url}/healthz`)).status).toBe(200);
  });
});

describe('when the host goes', () => {
  it('an agent killed mid-relay: the request in flight gets 502, the WebSocket 1011, the orchestrator stays up and says the host is offline', async () => {
    const base = '/comfyui/studio/comfy';
    const listener = await openSocket(`${base}/ws?clientId=${randomUUID()}`);
    const slow = call('GET', `${base}/api/standin-tools/slow?ms=15000`);
    await waitFor(async () => (await comfy.state<{ requests: string[] }>()).requests.includes('GET /standin-tools/slow'), { what: 'the slow request to reach ComfyUI' });
    await agent.kill('SIGKILL');
    const answer = await slow;
    expect(answer.status).toBe(502);
    expect(answer.json.error).toMatchObject({ code: 'RELAY_FAILED', message: expect.stringContaining('studio') });
    expect((await listener.closed).code).toBe(1011);
    expect((await fetch(`${url}/healthz`)).status).toBe(200);
    expect(serve.child.exitCode).toBeNull();
    await waitFor(async () => (await call('GET', `${base}/system_stats`)).status === 503, { what: 'the host to be offline' });
    const offline = await call('GET', `${base}/system_stats`);
    expect(offline.json.error.code).toBe('HOST_OFFLINE');
    expect(offline.headers.get('retry-after')).toBe('10');
  });
});

describe('through `gpumesh up`\'s own agent, linked in memory', () => {
  it('the same relay: ComfyUI\'s answers and WebSocket, and a body in many pieces, byte for byte', async () => {
    const mesh = await startMesh({ config: { models: { comfy: { engine: 'comfyui', types: ['image'], memoryMB: 16, settings: { url: comfy.url, passthrough: true } } } } });
    try {
      const auth = { authorization: `Bearer ${mesh.admin}` };
      const host = ((await (await fetch(`${mesh.url}/v1/status`, { headers: auth })).json()) as { hosts: { id: string }[] }).hosts[0]!.id;
      const base = `${mesh.url}/comfyui/${host}/comfy`;
      expect(((await (await fetch(`${base}/system_stats`, { headers: auth })).json()) as { system: { comfyui_version: string } }).system.comfyui_version).toBe('comfyui-standin');
      const payload = randomBytes(3 * 1024 * 1024 + 7);
      const put = await fetch(`${base}/api/standin-tools/image/local`, { method: 'PUT', headers: auth, body: payload });
      expect(((await put.json()) as { sha256: string }).sha256).toBe(sha256(payload));
      const clientId = randomUUID();
      const socket = new WebSocket(`${base.replace(/^http/, 'ws')}/ws?clientId=${clientId}`, { headers: auth });
      const binary = new Promise<Buffer>((resolve) => socket.on('message', (data: Buffer, isBinary) => isBinary && resolve(data)));
      await new Promise((resolve) => socket.once('open', resolve));
      const sent = await (await fetch(`${base}/api/standin-tools/send`, { method: 'POST', headers: auth, body: JSON.stringify({ clientId, bytes: 2_000_000 }) })).json() as { sha256: string };
      expect(sha256(await binary)).toBe(sent.sha256);
      socket.close(1000);
    } finally {
      await mesh.stop();
      removeDir(mesh.data);
    }
  });
});
