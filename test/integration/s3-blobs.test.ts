import { createHash, randomBytes } from 'node:crypto';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { HeadObjectCommand } from '@aws-sdk/client-s3';
import sharp from 'sharp';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { removeDir, startMesh, waitFor, type RunningMesh } from '../helpers/mesh.js';
import { startS3StandIn, type S3StandIn } from '../helpers/s3-stand-in.js';
import { TcpCut } from '../helpers/tcp-cut.js';

/**
 * A real `gpumesh up` whose blobs live in a bucket (`blobs: {kind: s3}`) on s3rver, the stand-in S3 server on
 * loopback, reached through a proxy the test can cut: a picture is made, stored in the bucket and served verified;
 * a client's picture goes in and image-to-image reads it back; then the bucket goes away — uploads get a clear 503,
 * a job's output fails its attempt and is retried, nothing is published under a digest — and the mesh carries on
 * by itself once the bucket is back.
 */
const PREFIX = 'mesh/';
let standIn: S3StandIn;
let proxy: TcpCut;
let mesh: RunningMesh;

beforeAll(async () => {
  standIn = await startS3StandIn();
  proxy = await TcpCut.start(standIn.port);
  mesh = await startMesh({
    config: {
      blobs: { kind: 's3', bucket: standIn.bucket, prefix: PREFIX, endpoint: proxy.url, ...standIn.credentials, maxAttempts: 2 },
      // Room for a few failed attempts while the bucket is away.
      retry: { backoffMs: 300 },
      models: { gen: { retries: 8 } },
    },
  });
}, 90_000);

afterAll(async () => {
  await mesh?.stop();
  if (mesh) removeDir(mesh.data);
  await proxy?.stop();
  await standIn?.stop();
});

const digestOf = (bytes: Uint8Array): string => `sha256:${createHash('sha256').update(bytes).digest('hex')}`;
const keyOf = (digest: string): string => `${PREFIX}sha256/${digest.slice(7, 9)}/${digest.slice(7)}`;

async function call(method: string, path: string, options: { body?: Uint8Array<ArrayBuffer> | string; headers?: Record<string, string> } = {}) {
  const response = await fetch(`${mesh.url}${path}`, { method, body: options.body, headers: { authorization: `Bearer ${mesh.admin}`, ...options.headers } });
  const bytes = Buffer.from(await response.arrayBuffer());
  let json: any = null;
  try { json = JSON.parse(bytes.toString()); } catch { /* not JSON */ }
  return { status: response.status, headers: response.headers, bytes, json };
}

const submit = (input: Record<string, unknown>, wait = true) => call('POST', '/v1/jobs', {
  body: JSON.stringify({ type: 'image', input }), headers: { 'content-type': 'application/json', ...(wait && { prefer: 'wait=60' }) },
});

/** Whether the bucket itself (asked directly, not through the proxy) holds the blob. */
async function inBucket(digest: string): Promise<boolean> {
  try {
    await standIn.client.send(new HeadObjectCommand({ Bucket: standIn.bucket, Key: keyOf(digest) }));
    return true;
  } catch {
    return false;
  }
}

describe('gpumesh up with its blobs in a bucket (s3rver as the stand-in S3 server)', () => {
  it('makes a picture, keeps it in the bucket (not on local disk) and serves it verified, ranges too', async () => {
    const { status, json: job } = await submit({ prompt: 'a lighthouse in fog', seed: 3, width: 64, height: 64 });
    expect(status).toBe(200);
    expect(job.status, JSON.stringify(job.error)).toBe('succeeded');
    const { digest } = job.artifacts[0];
    expect(await inBucket(digest)).toBe(true);
    expect(existsSync(join(mesh.data, 'blobs', 'sha256'))).toBe(false);
    // The log says where blobs are kept.
    const logs = join(mesh.data, 'logs');
    expect(readdirSync(logs).map((name) => readFileSync(join(logs, name), 'utf8')).join('')).toContain(`"blobs":"s3://${standIn.bucket}/${PREFIX}"`);
    const served = await call('GET', `/v1/blobs/${digest}`);
    expect(served.status).toBe(200);
    expect(served.headers.get('content-type')).toBe('image/png');
    expect(digestOf(served.bytes)).toBe(digest);
    expect((await sharp(served.bytes).metadata()).width).toBe(64);
    const range = await call('GET', `/v1/blobs/${digest}`, { headers: { range: 'bytes=0-7' } });
    expect(range.status).toBe(206);
    expect(range.bytes.equals(served.bytes.subarray(0, 8))).toBe(true);
    // Its result deleted, nothing else names the bytes: they leave the bucket.
    const deleted = await call('DELETE', `/v1/jobs/${job.id}/artifacts`);
    expect(JSON.parse(deleted.bytes.toString())).toMatchObject({ deleted: [digest], freed: [digest], freedBytes: served.bytes.length });
    expect(await inBucket(digest)).toBe(false);
    expect((await call('GET', `/v1/blobs/${digest}`)).status).toBe(404);
  }, 90_000);

  it('a client\'s picture goes into the bucket and image-to-image reads it back from there', async () => {
    const png = await sharp({ create: { width: 48, height: 32, channels: 3, background: { r: 200, g: 40, b: 40 } } }).png().toBuffer();
    const stored = await call('PUT', '/v1/blobs', { body: Uint8Array.from(png), headers: { 'content-type': 'image/png' } });
    expect(stored.status, JSON.stringify(stored.json)).toBe(201);
    expect(stored.json).toMatchObject({ digest: digestOf(png), mediaType: 'image/png' });
    expect(await inBucket(digestOf(png))).toBe(true);
    const { json: job } = await submit({ prompt: 'a red wall', seed: 1, image: digestOf(png), strength: 0.3 });
    expect(job.status, JSON.stringify(job.error)).toBe('succeeded');
  }, 90_000);

  it('the bucket goes away mid-upload: a clear 503 and nothing published; a job\'s output is retried; the mesh recovers when the bucket is back', async () => {
    // An upload, the bucket gone a megabyte into sending it on: 503 with Retry-After, naming the bucket; nothing
    // under its digest.
    const bytes = randomBytes(4 * 1024 * 1024);
    const cut = proxy.cutAfter(1024 * 1024);
    const refused = await call('PUT', '/v1/blobs', { body: Uint8Array.from(bytes), headers: { 'content-type': 'application/octet-stream' } });
    await cut;
    expect(refused.status).toBe(503);
    expect(refused.json.error.code).toBe('BLOB_STORE_UNAVAILABLE');
    expect(refused.json.error.message).toContain(`s3://${standIn.bucket}/${PREFIX}`);
    expect(Number(refused.headers.get('retry-after'))).toBeGreaterThan(0);
    expect(await inBucket(digestOf(bytes))).toBe(false);
    // A job whose picture cannot be kept: its attempt fails with the bucket's error and is retried.
    const { json: queued } = await submit({ prompt: 'a harbour at night', seed: 9, width: 64, height: 64 }, false);
    const failedOnce = await waitFor(async () => {
      const { json } = await call('GET', `/v1/jobs/${queued.id}`);
      return json.attempts.some((attempt: any) => attempt.error?.code === 'BLOB_STORE_UNAVAILABLE') ? json : null;
    }, { timeoutMs: 60_000, what: 'an attempt failed by the bucket outage' });
    expect(failedOnce.status).not.toBe('failed');
    // The bucket is back: nothing to restart.
    await proxy.restore();
    const done = await waitFor(async () => {
      const { json } = await call('GET', `/v1/jobs/${queued.id}`);
      return json.status === 'succeeded' || json.status === 'failed' ? json : null;
    }, { timeoutMs: 60_000, what: 'the job to end' });
    expect(done.status, JSON.stringify(done.error)).toBe('succeeded');
    const served = await call('GET', `/v1/blobs/${done.artifacts[0].digest}`);
    expect(served.status).toBe(200);
    expect(digestOf(served.bytes)).toBe(done.artifacts[0].digest);
    const stored = await call('PUT', '/v1/blobs', { body: Uint8Array.from(bytes), headers: { 'content-type': 'application/octet-stream' } });
    expect(stored.status).toBe(201);
    expect(await inBucket(digestOf(bytes))).toBe(true);
  }, 120_000);
});

describe('blobs.presign: clients read straight from the bucket', () => {
  it('answers a client 307 to a presigned GET with the same headers; agents, HEAD and ranges stay on the verified path', async () => {
    const presigning = await startMesh({
      config: { blobs: { kind: 's3', bucket: standIn.bucket, prefix: 'presign/', endpoint: `http://127.0.0.1:${standIn.port}`, ...standIn.credentials, presign: true, presignSeconds: 60 } },
    });
    try {
      const headers = { authorization: `Bearer ${presigning.admin}` };
      // The agent pulled gen from the bucket through the orchestrator (no redirect for it) and the picture was made.
      const made = await fetch(`${presigning.url}/v1/jobs`, {
        method: 'POST', headers: { ...headers, 'content-type': 'application/json', prefer: 'wait=60' },
        body: JSON.stringify({ type: 'image', input: { prompt: 'a presigned fox', width: 64, height: 64, steps: 2 } }),
      });
      const job = (await made.json()) as { status: string; artifacts: { digest: string }[] };
      expect(job.status).toBe('succeeded');
      const { digest } = job.artifacts[0]!;

      const redirect = await fetch(`${presigning.url}/v1/blobs/${digest}`, { headers, redirect: 'manual' });
      expect(redirect.status).toBe(307);
      const location = redirect.headers.get('location')!;
      expect(new URL(location).port).toBe(String(standIn.port));
      expect(location).toContain('X-Amz-Signature=');
      // Read from the bucket with no grant at all: the signature is the permission, for a minute.
      const direct = await fetch(location);
      expect(direct.status).toBe(200);
      expect(direct.headers.get('content-type')).toBe('image/png');
      expect(digestOf(new Uint8Array(await direct.arrayBuffer()))).toBe(digest);

      expect((await fetch(`${presigning.url}/v1/blobs/${digest}`, { method: 'HEAD', headers, redirect: 'manual' })).status).toBe(200);
      const range = await fetch(`${presigning.url}/v1/blobs/${digest}`, { headers: { ...headers, range: 'bytes=0-7' }, redirect: 'manual' });
      expect(range.status).toBe(206);
      // A grant that may not see the blob gets 404 as before, not a URL.
      const created = await fetch(`${presigning.url}/v1/grants`, { method: 'POST', headers: { ...headers, 'content-type': 'application/json' }, body: JSON.stringify({ kind: 'client', albums: ['elsewhere'] }) });
      const stranger = ((await created.json()) as { token: string }).token;
      expect((await fetch(`${presigning.url}/v1/blobs/${digest}`, { headers: { authorization: `Bearer ${stranger}` }, redirect: 'manual' })).status).toBe(404);
    } finally {
      await presigning.stop();
      removeDir(presigning.data);
    }
  });
});
