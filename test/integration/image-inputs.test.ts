import { createHash } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import sharp from 'sharp';
import { narrowGrant } from '../../src/orchestrator/auth/index.js';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { removeDir, startMesh, tempDir, type RunningMesh } from '../helpers/mesh.js';
import { gpumeshRun } from '../helpers/processes.js';
import { blobDirEntries, blobEntry } from '../helpers/blob-dir.js';

/**
 * Pictures as job inputs, through a real `gpumesh up` and its agent: a client stores a picture by digest, an image
 * job starts from it (image-to-image on the built-in gen, which the agent fetches by digest and decodes), a mask keeps
 * what it covers; and every picture gpumesh should not decode — a bomb by its header, a truncated file, a polyglot,
 * a type that disagrees with the bytes, a file that is no picture — is a 400 that names why, with nothing recorded.
 */
let mesh: RunningMesh;

beforeAll(async () => {
  mesh = await startMesh();
});
afterAll(async () => {
  await mesh?.stop();
  if (mesh) removeDir(mesh.data);
});

const digestOf = (bytes: Uint8Array): string => `sha256:${createHash('sha256').update(bytes).digest('hex')}`;

async function call(method: string, path: string, options: { grant?: string; body?: Uint8Array<ArrayBuffer> | string; headers?: Record<string, string> } = {}): Promise<{ status: number; json: any }> {
  const response = await fetch(`${mesh.url}${path}`, {
    method, body: options.body, headers: { authorization: `Bearer ${options.grant ?? mesh.admin}`, ...options.headers },
  });
  const text = await response.text();
  let json: any = null;
  try { json = JSON.parse(text); } catch { /* not JSON */ }
  return { status: response.status, json };
}

const put = (bytes: Uint8Array, headers: Record<string, string> = { 'content-type': 'application/octet-stream' }, grant?: string) =>
  call('PUT', '/v1/blobs', { body: Uint8Array.from(bytes), headers, ...(grant ? { grant } : {}) });

async function submitAndWait(input: Record<string, unknown>, grant?: string): Promise<{ status: number; json: any }> {
  return call('POST', '/v1/jobs', {
    ...(grant ? { grant } : {}),
    body: JSON.stringify({ type: 'image', input }), headers: { 'content-type': 'application/json', prefer: 'wait=30' },
  });
}

/** The RGB pixels of a job's result. */
async function resultPixels(job: any): Promise<Buffer> {
  expect(job.status, JSON.stringify(job.error)).toBe('succeeded');
  const response = await fetch(`${mesh.url}/v1/blobs/${job.artifacts[0].digest}`, { headers: { authorization: `Bearer ${mesh.admin}` } });
  return sharp(Buffer.from(await response.arrayBuffer())).removeAlpha().raw().toBuffer();
}

const meanDifference = (a: Uint8Array, b: Uint8Array): number => {
  let sum = 0;
  for (let i = 0; i < a.length; i++) sum += Math.abs(a[i]! - b[i]!);
  return sum / a.length;
};

/** A 96×64 picture with shapes and colours the generator's palette can show: blue and orange halves, a light disc. */
async function photo(): Promise<Buffer> {
  const svg = `<svg xmlns="http://www.w3.org/2000/svg" width="96" height="64">
    <rect width="48" height="64" fill="#3060c0"/><rect x="48" width="48" height="64" fill="#d08030"/>
    <circle cx="48" cy="32" r="18" fill="#e0d0a0"/></svg>`;
  return sharp(Buffer.from(svg)).png().toBuffer();
}

describe('image-to-image from a stored picture', () => {
  it('starts from the picture: the lower the strength, the closer the result; its size is the picture’s', async () => {
    const png = await photo();
    const stored = await put(png, { 'content-type': 'image/png' });
    expect(stored.status).toBe(201);
    expect(stored.json).toEqual({ digest: digestOf(png), bytes: png.length, mediaType: 'image/png' });
    const original = await sharp(png).removeAlpha().raw().toBuffer();

    const gentle = await submitAndWait({ prompt: 'a harbour at dusk', seed: 7, image: stored.json.digest, strength: 0.2 });
    expect(gentle.status).toBe(200);
    expect(gentle.json.input).toMatchObject({ image: stored.json.digest, strength: 0.2, width: 96, height: 64 });
    const strong = await submitAndWait({ prompt: 'a harbour at dusk', seed: 7, image: stored.json.digest, strength: 1 });
    const plain = await submitAndWait({ prompt: 'a harbour at dusk', seed: 7, width: 96, height: 64 });

    const gentleDiff = meanDifference(await resultPixels(gentle.json), original);
    const strongDiff = meanDifference(await resultPixels(strong.json), original);
    const plainDiff = meanDifference(await resultPixels(plain.json), original);
    expect(gentleDiff).toBeLessThan(strongDiff);
    expect(gentleDiff).toBeLessThan(plainDiff / 2);
  });

  it('a mask keeps what it covers (opaque) and repaints the rest (transparent)', async () => {
    const png = await photo();
    const { json: image } = await put(png);
    // Opaque on the left half, transparent on the right.
    const maskSvg = '<svg xmlns="http://www.w3.org/2000/svg" width="96" height="64"><rect width="48" height="64" fill="#000"/></svg>';
    const mask = await sharp(Buffer.from(maskSvg)).ensureAlpha().png().toBuffer();
    const { json: maskBlob } = await put(mask, { 'content-type': 'image/png' });
    const job = await submitAndWait({ prompt: 'a harbour at dusk', seed: 3, image: image.digest, mask: maskBlob.digest, strength: 1 });
    const pixels = await resultPixels(job.json);
    const original = await sharp(png).removeAlpha().raw().toBuffer();
    const half = (buffer: Buffer, left: boolean): number[] => {
      const out: number[] = [];
      for (let y = 0; y < 64; y++) for (let x = left ? 0 : 48; x < (left ? 48 : 96); x++) for (let c = 0; c < 3; c++) out.push(buffer[(y * 96 + x) * 3 + c]!);
      return out;
    };
    expect(half(pixels, true)).toEqual(half(original, true));
    expect(meanDifference(Uint8Array.from(half(pixels, false)), Uint8Array.from(half(original, false)))).toBeGreaterThan(5);
  });
});

/** A PNG whose header claims `width` × `height` (the CRC recomputed, so only the size lies). */
async function pngClaiming(width: number, height: number): Promise<Buffer> {
  const png = Buffer.from(await sharp({ create: { width: 8, height: 8, channels: 3, background: '#888' } }).png().toBuffer());
  png.writeUInt32BE(width, 16);
  png.writeUInt32BE(height, 20);
  const crc = crc32(png.subarray(12, 29));
  png.writeUInt32BE(crc, 29);
  return png;
}

function crc32(bytes: Uint8Array): number {
  let crc = 0xffffffff;
  for (const byte of bytes) {
    crc ^= byte;
    for (let k = 0; k < 8; k++) crc = (crc >>> 1) ^ (0xedb88320 & -(crc & 1));
  }
  return (crc ^ 0xffffffff) >>> 0;
}

describe('pictures gpumesh will not decode', () => {
  it('refuses a bomb, a truncated file, a polyglot, a type that disagrees with the bytes, and no picture at all', async () => {
    const good = await sharp({ create: { width: 64, height: 64, channels: 3, background: '#777', noise: { type: 'gaussian', mean: 128, sigma: 40 } } }).png().toBuffer();
    const jpeg = await sharp(good).jpeg().toBuffer();
    const cases: [string, Buffer, Record<string, string>, RegExp][] = [
      ['a decompression bomb', await pngClaiming(60_000, 60_000), {}, /3600000000 pixels; the limit is/],
      ['a truncated PNG', good.subarray(0, Math.floor(good.length / 2)), {}, /does not decode/],
      ['a PNG that is also something else', Buffer.concat([good, Buffer.from('PK\x03\x04<html><script>alert(1)</script>')]), {}, /bytes follow the end of the PNG/],
      ['a JPEG with a page after its end', Buffer.concat([jpeg, Buffer.from('<html><script>alert(1)</script></html>')]), {}, /bytes follow the end of the JPEG/],
      ['a PNG sent as a JPEG', good, { 'content-type': 'image/jpeg' }, /sent as image\/jpeg but its bytes are image\/png/],
      ['a PNG named .jpg', good, { 'content-disposition': 'attachment; filename="holiday.jpg"' }, /name ends in \.jpg but its bytes are image\/png/],
      ['text sent as a PNG', Buffer.from('just words, not a picture'), { 'content-type': 'image/png' }, /pictures must be PNG, JPEG or WebP/],
    ];
    const before = blobDirEntries(mesh.data);
    for (const [what, bytes, headers, message] of cases) {
      const answer = await put(Uint8Array.from(bytes), { 'content-type': 'application/octet-stream', ...headers });
      expect(answer.status, what).toBe(400);
      expect(answer.json.error.code, what).toBe('IMAGE_REFUSED');
      expect(answer.json.error.message, what).toMatch(message);
      // Nothing was kept: the digest is not a blob anyone may read or name.
      expect((await call('GET', `/v1/blobs/${digestOf(bytes)}`)).status, what).toBe(404);
    }
    // Judged before it is stored: not a byte of any of them reached the blob folder, not even for a moment's spool.
    expect(blobDirEntries(mesh.data)).toEqual(before);
    // The mesh still answers, and a good picture is still taken.
    expect((await put(good, { 'content-type': 'image/png' })).status).toBe(201);
    expect(blobDirEntries(mesh.data)).toContain(blobEntry(digestOf(good), good.length));
  });

  it('a job naming no stored picture, or one its grant may not read, is a 400 naming the field', async () => {
    const before = blobDirEntries(mesh.data);
    const missing = await submitAndWait({ prompt: 'x', image: `sha256:${'0'.repeat(64)}` });
    expect(missing.status).toBe(400);
    expect(missing.json.error).toMatchObject({ code: 'INVALID_INPUT', message: expect.stringContaining('image: no blob') });
    const notDigest = await submitAndWait({ prompt: 'x', image: 'https://example.com/cat.png' });
    expect(notDigest.status).toBe(400);
    expect(notDigest.json.error.message).toContain('image: must be a blob digest');
    const orphanMask = await submitAndWait({ prompt: 'x', mask: `sha256:${'0'.repeat(64)}` });
    expect(orphanMask.status).toBe(400);
    expect(orphanMask.json.error.message).toContain('mask and strength need an image');

    // Another client's picture: a scoped grant of another lineage may not name it.
    const { json: mine } = await put(await photo());
    const created = await call('POST', '/v1/grants', { body: JSON.stringify({ kind: 'client', types: ['image'] }), headers: { 'content-type': 'application/json' } });
    const stranger = narrowGrant(created.json.token, ['albums default']);
    const theirs = await submitAndWait({ prompt: 'x', image: mine.digest }, stranger);
    expect(theirs.status).toBe(400);
    expect(theirs.json.error.message).toContain('that this grant may read');
    // The refused jobs wrote nothing to the blob folder: it holds what it did, and the picture stored on purpose.
    expect(blobDirEntries(mesh.data)).toEqual([...new Set([...before, blobEntry(mine.digest, mine.bytes)])].sort());
  });
});

describe('gpumesh submit --input image=./photo.png', () => {
  it('uploads the picture, names it by digest and starts from it; a file that is not what its name says is refused', async () => {
    const dir = tempDir();
    const env = { GPUMESH_HOME: mesh.data, GPUMESH_URL: mesh.url };
    try {
      writeFileSync(join(dir, 'photo.png'), await photo());
      const result = await gpumeshRun(['submit', '--prompt', 'a harbour at dusk', '--input', 'image=' + join(dir, 'photo.png'), '--strength', '0.3', '--wait', '--json', '--no-save'], env);
      expect(result.code, result.output).toBe(0);
      const ended = JSON.parse(result.output.slice(result.output.indexOf('{')));
      expect(ended.type).toBe('succeeded');
      expect(ended.artifacts[0]).toMatchObject({ width: 96, height: 64 });
      const job = await call('GET', `/v1/jobs/${ended.jobId}`);
      expect(job.json.input).toMatchObject({ image: digestOf(await photo()), strength: 0.3, width: 96, height: 64 });

      writeFileSync(join(dir, 'photo.jpg'), await photo());
      const wrong = await gpumeshRun(['submit', '--prompt', 'x', '--input', 'image=' + join(dir, 'photo.jpg')], env);
      expect(wrong.code).toBe(1);
      expect(wrong.output).toContain('name ends in .jpg but its bytes are image/png');
    } finally {
      removeDir(dir);
    }
  });

  it('a command refused on the spot — a bad --input, --size, or a file it cannot read — uploads none of its pictures; one refused later deletes those it stored', async () => {
    const dir = tempDir();
    const env = { GPUMESH_HOME: mesh.data, GPUMESH_URL: mesh.url };
    try {
      // A picture the mesh has never seen: uploading it would add a blob.
      const fresh = await sharp({ create: { width: 40, height: 24, channels: 3, background: '#2a7f5c' } }).png().toBuffer();
      writeFileSync(join(dir, 'fresh.png'), fresh);
      const image = 'image=' + join(dir, 'fresh.png');
      const before = blobDirEntries(mesh.data);
      const refusals: [string[], string][] = [
        [['--input', image, '--input', '{"strength": 0.4'], '--input must be a JSON object'],
        [['--input', image, '--size', 'big'], '--size must look like 256x256, not "big"'],
        [['--input', image, '--input', 'mask=' + join(dir, 'missing.png')], `--input mask=${join(dir, 'missing.png')}: cannot read the file`],
      ];
      for (const [args, message] of refusals) {
        const refused = await gpumeshRun(['submit', '--prompt', 'x', ...args], env);
        expect(refused.code, refused.output).toBe(1);
        expect(refused.output).toContain(message);
        expect(blobDirEntries(mesh.data), message).toEqual(before);
      }
      // Refused by the orchestrator once the pictures were stored — a mask it will not take after the image, a job
      // it will not take — the command deletes what it stored: the folder is as it was.
      const jpegNamedPng = join(dir, 'mask.png');
      writeFileSync(jpegNamedPng, await sharp(fresh).jpeg().toBuffer());
      const garbage = join(dir, 'garbage.png');
      writeFileSync(garbage, Buffer.from('not a picture at all'));
      const late: [string[], string][] = [
        [['--input', image, '--input', 'mask=' + jpegNamedPng], `--input mask=${jpegNamedPng}: Not a picture gpumesh will decode: its name ends in .png but its bytes are image/jpeg`],
        [['--input', image, '--input', 'mask=' + garbage], 'Not a picture gpumesh will decode: mask'],
        [['--input', image, '--model', 'no-such-model'], 'no-such-model'],
      ];
      for (const [args, message] of late) {
        const refused = await gpumeshRun(['submit', '--prompt', 'x', ...args], env);
        expect(refused.code, refused.output).toBe(1);
        expect(refused.output).toContain(message);
        // Files only: the store keeps the folder a deleted blob was in (another may be renamed into it at that moment).
        const files = (entries: string[]) => entries.filter((entry) => !entry.endsWith('/'));
        expect(files(blobDirEntries(mesh.data)), message).toEqual(files(before));
      }
    } finally {
      removeDir(dir);
    }
  });
});
