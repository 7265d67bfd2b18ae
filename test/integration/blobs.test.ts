import { createHash, randomBytes } from 'node:crypto';
import { existsSync, readdirSync, readFileSync, truncateSync, writeFileSync } from 'node:fs';
import { request as httpRequest } from 'node:http';
import { join } from 'node:path';
import sharp from 'sharp';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import { LINK_PATH, LINK_PROTOCOL_VERSION, type OrchestratorMessage } from '../../src/protocol/index.js';
import { meshForFile, waitFor } from '../helpers/mesh.js';

/**
 * The blob route of a real orchestrator over HTTP: verified bytes, quarantine
 * of corrupt files, byte ranges. Blobs are delivered as an agent delivers
 * outputs — a scripted agent on a real link, uploading through the real upload
 * route with its batch's credential (so the store records their size and media
 * type) — and corrupted on disk, as a failing disk or a careless operator would.
 */
const running = meshForFile({ args: ['--no-agent'] });
/** A job the scripted agent keeps running, and the credential that lets it upload that job's outputs. */
let jobId: string;
let credential: string;
/** The PNG output of a job that finished. */
let published: string;
let agent: WebSocket;

const digestOf = (bytes: Uint8Array): string => `sha256:${createHash('sha256').update(bytes).digest('hex')}`;
const fileOf = (digest: string): string => join(running().data, 'blobs', 'sha256', digest.slice(7, 9), digest.slice(7));
const auth = (): Record<string, string> => ({ authorization: `Bearer ${running().admin}` });

async function upload(bytes: Buffer, mediaType = 'video/mp4'): Promise<string> {
  const digest = digestOf(bytes);
  const response = await fetch(`${running().url}/v1/jobs/${jobId}/outputs/${digest}`, {
    method: 'PUT', body: new Uint8Array(bytes), headers: { authorization: `Bearer ${credential}`, 'content-type': mediaType },
  });
  expect(response.status).toBe(201);
  return digest;
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
  const { token } = await client.request<{ token: string }>('POST', '/v1/grants', { kind: 'agent', host: 'scripted', classes: ['image'] });
  const url = new URL(LINK_PATH, running().url);
  url.protocol = 'ws:';
  agent = new WebSocket(url, { headers: { authorization: `Bearer ${token}` } });
  const inbox: OrchestratorMessage[] = [];
  agent.on('message', (data) => {
    const message = JSON.parse(data.toString()) as OrchestratorMessage;
    // The autoscaler places a replica before it sends batches: answer as an agent that loaded it.
    if (message.type === 'load') {
      agent.send(JSON.stringify({ type: 'loaded', model: message.model.name, digest: message.model.digest, device: 'cpu', memoryMB: message.model.memoryMB }));
      return;
    }
    inbox.push(message);
  });
  agent.on('open', () => agent.send(JSON.stringify({
    type: 'hello', protocol: LINK_PROTOCOL_VERSION, host: 'scripted', classes: ['image'], engines: ['onnx'], models: [], inFlight: [],
    devices: [{ id: 'cpu', kind: 'cpu', name: 'scripted', memoryTotalMB: 8192, budgetMB: 4096, usedMB: 0 }], concurrency: 1, version: 'test',
  })));
  const nextRun = () => waitFor(() => {
    const index = inbox.findIndex((message) => message.type === 'run');
    return index < 0 ? null : (inbox.splice(index, 1)[0] as Extract<OrchestratorMessage, { type: 'run' }>);
  }, { what: 'a run message' });
  // The first job finishes with a real PNG, uploaded like any output, so it is an artifact.
  const first = await client.submit({ type: 'image', input: { prompt: 'blob owner', width: 64, height: 64, steps: 2 } });
  const run = await nextRun();
  jobId = first.id;
  credential = run.uploadCredential;
  const png = await sharp({ create: { width: 64, height: 64, channels: 3, background: '#3366cc' } }).png().toBuffer();
  published = await upload(png, 'image/png');
  agent.send(JSON.stringify({ type: 'done', jobId, batchId: run.batchId, artifacts: [{ digest: published, mediaType: 'image/png', bytes: png.length }], timings: { loadMs: 0, computeMs: 1, totalMs: 1 } }));
  expect((await client.follow(first.id)).type).toBe('succeeded');
  // The second stays running: the tests upload their blobs as its outputs.
  const second = await client.submit({ type: 'image', input: { prompt: 'blob holder', width: 64, height: 64, steps: 2 } });
  const held = await nextRun();
  jobId = second.id;
  credential = held.uploadCredential;
});

afterAll(() => agent?.close());

describe('verified blobs', () => {
  it('a good blob streams whole and is hashed once; later GETs are served from its verified mark', async () => {
    const bytes = randomBytes(1024 * 1024 + 17);
    const digest = await upload(bytes);
    const before = await verifications();
    const first = await get(digest);
    expect(first.status).toBe(200);
    expect(first.bytes.equals(bytes)).toBe(true);
    expect(first.headers.get('content-length')).toBe(String(bytes.length));
    expect(first.headers.get('content-type')).toBe('video/mp4');
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
    const bytes = randomBytes(2 * 1024 * 1024);
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
    const bytes = randomBytes(512 * 1024);
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
    const digest = await upload(randomBytes(300_000));
    const before = { size: await failures('size'), hashes: await verifications() };
    truncateSync(fileOf(digest), 150_000);
    expectIntegrityError(await get(digest), 'its file holds 150000 bytes, not the 300000 bytes recorded');
    expect(await failures('size')).toBe(before.size + 1);
    expect(await verifications()).toBe(before.hashes); // caught by the size check, without reading
    expect(quarantined(digest)).toHaveLength(1);
  });

  it('a range of a corrupt blob is refused before a byte is sent, even outside the flipped byte', async () => {
    const digest = await upload(randomBytes(400_000));
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
    bytes = randomBytes(SIZE);
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
