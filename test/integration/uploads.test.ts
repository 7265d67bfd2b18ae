import { createHash, randomBytes } from 'node:crypto';
import http from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import sharp from 'sharp';
import { narrowGrant } from '../../src/orchestrator/auth/index.js';
import { removeDir, startMesh, type RunningMesh } from '../helpers/mesh.js';
import { blobDirEntries, blobEntry } from '../helpers/blob-dir.js';

/**
 * A client's files by digest, against a real `gpumesh up --no-agent` (upload limit 1 MiB): a resumable upload that
 * survives a connection dropped mid-chunk and resumes at the offset the server reached, chunks at the wrong offset
 * refused with the offset to resume from, the result deduplicated by digest, `PUT /v1/blobs` in one request with the
 * type its bytes say, and what another lineage may see of it.
 */
let mesh: RunningMesh;
const LIMIT = 1024 * 1024;

beforeAll(async () => {
  mesh = await startMesh({ args: ['--no-agent'], config: { server: { uploadLimitBytes: LIMIT } } });
});
afterAll(async () => {
  await mesh?.stop();
  if (mesh) removeDir(mesh.data);
});

const digestOf = (bytes: Uint8Array): string => `sha256:${createHash('sha256').update(bytes).digest('hex')}`;

async function call(method: string, path: string, options: { grant?: string; body?: Uint8Array<ArrayBuffer> | string; headers?: Record<string, string> } = {}): Promise<{ status: number; json: any; headers: Headers }> {
  const response = await fetch(`${mesh.url}${path}`, {
    method, body: options.body, headers: { authorization: `Bearer ${options.grant ?? mesh.admin}`, ...options.headers },
  });
  const text = await response.text();
  let json: any = null;
  try { json = JSON.parse(text); } catch { /* empty */ }
  return { status: response.status, json, headers: response.headers };
}

/** Send `bytes` as a chunk at `offset` and cut the connection after `cutAfter` of them, as a dropped Wi-Fi would. */
function droppedChunk(id: string, offset: number, bytes: Buffer, cutAfter: number): Promise<void> {
  return new Promise((resolve) => {
    const url = new URL(`/v1/uploads/${id}`, mesh.url);
    const request = http.request(url, {
      method: 'PATCH', headers: { authorization: `Bearer ${mesh.admin}`, 'upload-offset': String(offset), 'content-type': 'application/octet-stream', 'content-length': String(bytes.length) },
    });
    request.on('error', () => resolve());
    request.on('response', () => resolve());
    request.write(bytes.subarray(0, cutAfter), () => setTimeout(() => {
      request.destroy();
      resolve();
    }, 200));
  });
}

describe('resumable uploads', () => {
  it('resume after a dropped connection at the offset reached; the result is one blob by digest', async () => {
    const file = randomBytes(600 * 1024);
    const started = await call('POST', '/v1/uploads', { body: JSON.stringify({ bytes: file.length }), headers: { 'content-type': 'application/json' } });
    expect(started.status).toBe(201);
    expect(started.json).toMatchObject({ offset: 0, total: file.length });
    const { id } = started.json as { id: string };

    // The first chunk arrives whole.
    const first = await call('PATCH', `/v1/uploads/${id}`, { body: file.subarray(0, 200 * 1024), headers: { 'upload-offset': '0', 'content-type': 'application/octet-stream' } });
    expect(first.status).toBe(200);
    expect(first.json.offset).toBe(200 * 1024);
    expect(first.headers.get('upload-offset')).toBe(String(200 * 1024));

    // The second is cut off part of the way: the server keeps what arrived and says where it stands.
    await droppedChunk(id, 200 * 1024, file.subarray(200 * 1024), 100 * 1024);
    const state = await call('GET', `/v1/uploads/${id}`);
    const reached = state.json.offset as number;
    expect(reached).toBeGreaterThan(200 * 1024);
    expect(reached).toBeLessThan(file.length);

    // A retry of the whole second chunk is at the wrong offset: 409, naming where to resume.
    const wrong = await call('PATCH', `/v1/uploads/${id}`, { body: file.subarray(200 * 1024), headers: { 'upload-offset': String(200 * 1024), 'content-type': 'application/octet-stream' } });
    expect(wrong.status).toBe(409);
    expect(wrong.json.error).toMatchObject({ code: 'UPLOAD_CONFLICT', message: expect.stringContaining(`from offset ${reached}`) });
    // Completing early is refused too: the announced size is not reached.
    expect((await call('POST', `/v1/uploads/${id}/complete`)).status).toBe(409);

    const rest = await call('PATCH', `/v1/uploads/${id}`, { body: file.subarray(reached), headers: { 'upload-offset': String(reached), 'content-type': 'application/octet-stream' } });
    expect(rest.json.offset).toBe(file.length);
    const done = await call('POST', `/v1/uploads/${id}/complete`);
    expect(done.status).toBe(200);
    expect(done.json).toEqual({ digest: digestOf(file), bytes: file.length, mediaType: 'application/octet-stream' });
    const back = await fetch(`${mesh.url}/v1/blobs/${digestOf(file)}`, { headers: { authorization: `Bearer ${mesh.admin}` } });
    expect(Buffer.from(await back.arrayBuffer()).equals(file)).toBe(true);
    // Gone once completed; the same bytes again are the same blob.
    expect((await call('GET', `/v1/uploads/${id}`)).status).toBe(404);
    const again = await call('PUT', '/v1/blobs', { body: file, headers: { 'content-type': 'application/octet-stream' } });
    expect(again.json.digest).toBe(digestOf(file));
  });

  it('refuses an upload past the limit (413) and keeps another lineage out of one it did not start (404)', async () => {
    expect((await call('POST', '/v1/uploads', { body: JSON.stringify({ bytes: LIMIT + 1 }), headers: { 'content-type': 'application/json' } })).status).toBe(413);
    const { json } = await call('POST', '/v1/uploads', { body: '{}', headers: { 'content-type': 'application/json' } });
    const tooMuch = await call('PATCH', `/v1/uploads/${json.id}`, { body: randomBytes(LIMIT + 10), headers: { 'upload-offset': '0', 'content-type': 'application/octet-stream' } });
    expect(tooMuch.status).toBe(413);
    const other = await call('POST', '/v1/grants', { body: JSON.stringify({ kind: 'client' }), headers: { 'content-type': 'application/json' } });
    expect((await call('GET', `/v1/uploads/${json.id}`, { grant: other.json.token })).status).toBe(404);
    expect((await call('DELETE', `/v1/uploads/${json.id}`)).status).toBe(204);
    expect((await call('PATCH', `/v1/uploads/${json.id}`, { body: 'x', headers: { 'upload-offset': '0', 'content-type': 'application/octet-stream' } })).status).toBe(404);
  });
});

describe('PUT /v1/blobs', () => {
  it('stores a file by digest with the type its bytes say; its lineage reads it back, an album-limited stranger does not', async () => {
    const client = (await call('POST', '/v1/grants', { body: JSON.stringify({ kind: 'client', albums: ['mine'] }), headers: { 'content-type': 'application/json' } })).json.token as string;
    const png = await sharp({ create: { width: 8, height: 8, channels: 3, background: '#c33' } }).png().toBuffer();
    // Declared as text: the bytes are a PNG, and that is what is recorded.
    const stored = await call('PUT', '/v1/blobs', { grant: client, body: png, headers: { 'content-type': 'text/plain' } });
    expect(stored.status).toBe(201);
    expect(stored.json).toEqual({ digest: digestOf(png), bytes: png.length, mediaType: 'image/png' });
    const mine = await fetch(`${mesh.url}/v1/blobs/${digestOf(png)}`, { headers: { authorization: `Bearer ${narrowGrant(client, ['actions blobs:read'])}` } });
    expect(mine.status).toBe(200);
    expect(mine.headers.get('content-type')).toBe('image/png');
    const stranger = (await call('POST', '/v1/grants', { body: JSON.stringify({ kind: 'client', albums: ['mine'] }), headers: { 'content-type': 'application/json' } })).json.token as string;
    expect((await call('GET', `/v1/blobs/${digestOf(png)}`, { grant: stranger })).status).toBe(404);
    // A grant that may not write blobs may not store one.
    const readOnly = narrowGrant(client, ['actions blobs:read']);
    expect((await call('PUT', '/v1/blobs', { grant: readOnly, body: png, headers: { 'content-type': 'image/png' } })).status).toBe(403);
    expect((await call('PUT', '/v1/blobs', { body: randomBytes(LIMIT + 1), headers: { 'content-type': 'application/octet-stream' } })).status).toBe(413);
  });
});

describe('a refused or abandoned file leaves nothing', () => {
  const chunk = (id: string, offset: number, bytes: Uint8Array<ArrayBuffer>) =>
    call('PATCH', `/v1/uploads/${id}`, { body: bytes, headers: { 'upload-offset': String(offset), 'content-type': 'application/octet-stream' } });

  it('an upload of a picture that does not decode is refused at completion and goes, bytes and all; nothing reaches the store', async () => {
    const before = blobDirEntries(mesh.data);
    const good = await sharp({ create: { width: 64, height: 64, channels: 3, background: '#345', noise: { type: 'gaussian', mean: 128, sigma: 50 } } }).png().toBuffer();
    // A PNG cut short: its signature says picture, its rows end early.
    const truncated = Uint8Array.from(good.subarray(0, Math.floor(good.length / 2)));
    const { json } = await call('POST', '/v1/uploads', { body: JSON.stringify({ bytes: truncated.length }), headers: { 'content-type': 'application/json' } });
    expect((await chunk(json.id, 0, truncated)).status).toBe(200);
    const refused = await call('POST', `/v1/uploads/${json.id}/complete`);
    expect(refused.status).toBe(400);
    expect(refused.json.error).toMatchObject({ code: 'IMAGE_REFUSED', message: expect.stringContaining('does not decode') });
    expect((await call('GET', `/v1/uploads/${json.id}`)).status).toBe(404);
    expect((await call('GET', `/v1/blobs/${digestOf(truncated)}`)).status).toBe(404);
    expect(blobDirEntries(mesh.data)).toEqual(before);
  });

  it('an upload given up is gone whole; one past the limit keeps what it took, to resume, until it is given up', async () => {
    const before = blobDirEntries(mesh.data);
    const file = randomBytes(300 * 1024);
    const { json } = await call('POST', '/v1/uploads', { body: JSON.stringify({ bytes: file.length }), headers: { 'content-type': 'application/json' } });
    expect((await chunk(json.id, 0, Uint8Array.from(file.subarray(0, 100 * 1024)))).status).toBe(200);
    expect(blobDirEntries(mesh.data)).toContain(`staging/${json.id} ${100 * 1024}`);
    expect((await call('DELETE', `/v1/uploads/${json.id}`)).status).toBe(204);
    expect(blobDirEntries(mesh.data)).toEqual(before);

    const open = await call('POST', '/v1/uploads', { body: '{}', headers: { 'content-type': 'application/json' } });
    const tooMuch = await chunk(open.json.id, 0, Uint8Array.from(randomBytes(LIMIT + 10)));
    expect(tooMuch.status).toBe(413);
    // No blob: only the upload's own bytes so far, which a resumed upload would go on from.
    expect(blobDirEntries(mesh.data).filter((entry) => !before.includes(entry)).every((entry) => entry.startsWith(`staging/${open.json.id} `))).toBe(true);
    expect((await call('DELETE', `/v1/uploads/${open.json.id}`)).status).toBe(204);
    expect(blobDirEntries(mesh.data)).toEqual(before);
  });

  it('a file sent as a picture that is not one is refused before it is stored, and a blob of the same bytes stored before stays', async () => {
    const bytes = Uint8Array.from(Buffer.from('{"files":{"detector":{"digest":"sha256:00","bytes":1}}}'));
    const stored = await call('PUT', '/v1/blobs', { body: bytes, headers: { 'content-type': 'application/octet-stream' } });
    expect(stored.status).toBe(201);
    const before = blobDirEntries(mesh.data);
    expect(before).toContain(blobEntry(stored.json.digest, bytes.length));
    const refused = await call('PUT', '/v1/blobs', { body: bytes, headers: { 'content-type': 'image/png' } });
    expect(refused.status).toBe(400);
    expect(refused.json.error).toMatchObject({ code: 'IMAGE_REFUSED', message: expect.stringContaining('pictures must be PNG, JPEG or WebP') });
    expect(blobDirEntries(mesh.data)).toEqual(before);
    expect((await call('GET', `/v1/blobs/${stored.json.digest}`)).status).toBe(200);
  });
});
