import { existsSync, readdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import sharp from 'sharp';
import { describe, expect, it } from 'vitest';
import { blobDirEntries, blobEntry } from '../helpers/blob-dir.js';
import { meshForFile, removeDir, tempDir } from '../helpers/mesh.js';
import { gpumeshRun } from '../helpers/processes.js';

/**
 * Deleting results gives their bytes back, through a real `gpumesh up` and its agent: the built-in generator makes the
 * same bytes for the same prompt, seed and size, so two jobs can publish one blob. Its bytes leave the store with the
 * last thing that names it — the other job's result, a client's stored file, a job that starts from it — and not before.
 */
const mesh = meshForFile();

async function call(method: string, path: string, options: { body?: Uint8Array<ArrayBuffer> | string; headers?: Record<string, string> } = {}): Promise<{ status: number; json: any }> {
  const response = await fetch(`${mesh().url}${path}`, { method, body: options.body, headers: { authorization: `Bearer ${mesh().admin}`, ...options.headers } });
  const text = await response.text();
  let json: any = null;
  try { json = JSON.parse(text); } catch { /* not JSON */ }
  return { status: response.status, json };
}

/** An image job, waited for: its id and its one result's digest and size. */
async function picture(input: Record<string, unknown>): Promise<{ id: string; digest: string; bytes: number }> {
  const { status, json } = await call('POST', '/v1/jobs', {
    body: JSON.stringify({ type: 'image', input: { width: 64, height: 64, steps: 2, ...input } }), headers: { 'content-type': 'application/json', prefer: 'wait=30' },
  });
  expect(status, JSON.stringify(json)).toBe(200);
  expect(json.status, JSON.stringify(json.error)).toBe('succeeded');
  return { id: json.id, digest: json.artifacts[0].digest, bytes: json.artifacts[0].bytes };
}

const stored = (digest: string, bytes: number): boolean => blobDirEntries(mesh().data).includes(blobEntry(digest, bytes));
const thumbnailsOf = (digest: string): string[] => {
  const dir = join(mesh().data, 'thumbnails');
  return existsSync(dir) ? readdirSync(dir).filter((name) => name.startsWith(digest.slice('sha256:'.length))) : [];
};

describe('deleted results give their bytes back', () => {
  it('the bytes of two jobs’ one result stay until both are deleted; then the blob, its record and its thumbnails are gone, and the same bytes can come again', async () => {
    const first = await picture({ prompt: 'twins', seed: 11 });
    const second = await picture({ prompt: 'twins', seed: 11 });
    const other = await picture({ prompt: 'twins', seed: 12 });
    expect(second.digest).toBe(first.digest);
    expect(other.digest).not.toBe(first.digest);
    expect((await fetch(`${mesh().url}/v1/blobs/${first.digest}/thumbnail?width=256`, { headers: { authorization: `Bearer ${mesh().admin}` } })).status).toBe(200);
    expect(thumbnailsOf(first.digest)).toHaveLength(1);

    const once = await call('DELETE', `/v1/jobs/${first.id}/artifacts`);
    expect(once).toEqual({ status: 200, json: { jobId: first.id, deleted: [first.digest], freed: [], freedBytes: 0 } });
    expect(stored(first.digest, first.bytes)).toBe(true);
    expect((await call('GET', `/v1/blobs/${first.digest}`)).status).toBe(200);
    expect(thumbnailsOf(first.digest)).toHaveLength(1);

    const twice = await call('DELETE', `/v1/jobs/${second.id}/artifacts`);
    expect(twice).toEqual({ status: 200, json: { jobId: second.id, deleted: [first.digest], freed: [first.digest], freedBytes: first.bytes } });
    expect(stored(first.digest, first.bytes)).toBe(false);
    expect(thumbnailsOf(first.digest)).toEqual([]);
    const gone = await call('GET', `/v1/blobs/${first.digest}`);
    expect(gone.status).toBe(404);
    expect(gone.json.error.code).toBe('NOT_FOUND');
    // Deleting again finds nothing to delete; the job itself stays, without results.
    expect(await call('DELETE', `/v1/jobs/${second.id}/artifacts`)).toEqual({ status: 200, json: { jobId: second.id, deleted: [], freed: [], freedBytes: 0 } });
    expect((await call('GET', `/v1/jobs/${second.id}`)).json).toMatchObject({ status: 'succeeded', artifacts: [] });
    // The other job's bytes were never in question.
    expect(stored(other.digest, other.bytes)).toBe(true);

    // The same bytes made again are stored and served again, with their media type.
    const again = await picture({ prompt: 'twins', seed: 11 });
    expect(again.digest).toBe(first.digest);
    expect(stored(first.digest, first.bytes)).toBe(true);
    const served = await fetch(`${mesh().url}/v1/blobs/${first.digest}`, { headers: { authorization: `Bearer ${mesh().admin}` } });
    expect(served.status).toBe(200);
    expect(served.headers.get('content-type')).toBe('image/png');
  });

  it('a result a client also stored as a file, or that a job started from, keeps its bytes', async () => {
    // Stored by a client too: PUT /v1/blobs of the same bytes.
    const kept = await picture({ prompt: 'kept by a client', seed: 21 });
    const bytes = new Uint8Array(await (await fetch(`${mesh().url}/v1/blobs/${kept.digest}`, { headers: { authorization: `Bearer ${mesh().admin}` } })).arrayBuffer());
    expect((await call('PUT', '/v1/blobs', { body: bytes, headers: { 'content-type': 'image/png' } })).json).toMatchObject({ digest: kept.digest });
    expect((await call('DELETE', `/v1/jobs/${kept.id}/artifacts`)).json).toMatchObject({ deleted: [kept.digest], freed: [] });
    expect(stored(kept.digest, kept.bytes)).toBe(true);
    expect((await call('GET', `/v1/blobs/${kept.digest}`)).status).toBe(200);

    // Named as a later job's input (image-to-image from a result).
    const start = await picture({ prompt: 'a start', seed: 31 });
    const derived = await picture({ prompt: 'from it', seed: 32, image: start.digest, strength: 0.5 });
    expect((await call('DELETE', `/v1/jobs/${start.id}/artifacts`)).json).toMatchObject({ deleted: [start.digest], freed: [] });
    expect(stored(start.digest, start.bytes)).toBe(true);
    // The derived job's own result has nothing else naming it: it goes (here from the command line).
    const cli = await gpumeshRun(['jobs', 'delete-results', derived.id, kept.id, '--url', mesh().url], { GPUMESH_GRANT: mesh().admin });
    expect(cli.code, cli.output).toBe(0);
    expect(cli.stdout).toBe(`${derived.id} 1 result deleted, 1 freed (${derived.bytes.toLocaleString('en')} bytes)\n${kept.id} had no results to delete\n`);
    expect(stored(derived.digest, derived.bytes)).toBe(false);
  });

  it('a client deletes a file it stored: its jobs may no longer name it; the bytes go unless a job took it as input or another grant stored them too', async () => {
    const grant = (await call('POST', '/v1/grants', { body: JSON.stringify({ kind: 'client', note: "one person" }), headers: { "content-type": "application/json" } })).json.token as string;
    const other = (await call('POST', '/v1/grants', { body: JSON.stringify({ kind: 'client', note: "another" }), headers: { "content-type": "application/json" } })).json.token as string;
    const as = (who: string) => ({ authorization: `Bearer ${who}` });
    const upload = async (who: string, shade: number) => {
      const png = await sharp({ create: { width: 32, height: 32, channels: 3, background: { r: shade, g: 90, b: 160 } } }).png().toBuffer();
      const response = await fetch(`${mesh().url}/v1/blobs`, { method: 'PUT', body: Uint8Array.from(png), headers: { ...as(who), 'content-type': 'image/png' } });
      expect(response.status).toBe(201);
      return (await response.json() as { digest: string; bytes: number });
    };
    const forget = async (who: string, digest: string) => {
      const response = await fetch(`${mesh().url}/v1/blobs/${digest}`, { method: 'DELETE', headers: as(who) });
      return { status: response.status, json: await response.json() as any };
    };

    // Never used: gone at once, and the lineage can no longer read it or start a job from it.
    const unused = await upload(grant, 10);
    expect(await forget(grant, unused.digest)).toEqual({ status: 200, json: { digest: unused.digest, freed: true, freedBytes: unused.bytes } });
    expect(stored(unused.digest, unused.bytes)).toBe(false);
    expect((await fetch(`${mesh().url}/v1/blobs/${unused.digest}`, { headers: as(grant) })).status).toBe(404);
    expect((await forget(grant, unused.digest)).json.error.code).toBe('NOT_FOUND');
    const refused = await fetch(`${mesh().url}/v1/jobs`, {
      method: 'POST', body: JSON.stringify({ type: 'image', input: { prompt: 'x', image: unused.digest } }), headers: { ...as(grant), 'content-type': 'application/json' },
    });
    expect(refused.status).toBe(400);
    expect((await refused.json() as any).error).toMatchObject({ code: 'INVALID_INPUT', message: expect.stringContaining(`no blob ${unused.digest}`) });

    // Stored by two lineages: one deleting it leaves the other's.
    const shared = await upload(grant, 20);
    expect((await upload(other, 20)).digest).toBe(shared.digest);
    expect((await forget(grant, shared.digest)).json).toEqual({ digest: shared.digest, freed: false, freedBytes: 0 });
    expect((await fetch(`${mesh().url}/v1/blobs/${shared.digest}`, { headers: as(other) })).status).toBe(200);
    expect((await forget(other, shared.digest)).json).toEqual({ digest: shared.digest, freed: true, freedBytes: shared.bytes });

    // Taken as a job's input: the job names it, so the bytes stay with the job's record.
    const used = await upload(grant, 30);
    const job = await fetch(`${mesh().url}/v1/jobs`, {
      method: 'POST', body: JSON.stringify({ type: 'image', input: { prompt: 'from my picture', image: used.digest, strength: 0.4 } }),
      headers: { ...as(grant), 'content-type': 'application/json', prefer: 'wait=30' },
    });
    expect((await job.json() as { status: string }).status).toBe('succeeded');
    expect((await forget(grant, used.digest)).json).toEqual({ digest: used.digest, freed: false, freedBytes: 0 });
    expect(stored(used.digest, used.bytes)).toBe(true);
  });

  it('gpumesh blobs put prints the digest a job names; blobs rm deletes it by digest or by the file, and says what was freed', async () => {
    const dir = tempDir();
    try {
      const path = join(dir, 'start.png');
      const png = await sharp({ create: { width: 24, height: 24, channels: 3, background: '#c05030' } }).png().toBuffer();
      writeFileSync(path, png);
      const env = { GPUMESH_GRANT: mesh().admin };
      const put = await gpumeshRun(['blobs', 'put', path, '--url', mesh().url], env);
      expect(put.code, put.output).toBe(0);
      const digest = put.stdout.split(' ')[0]!;
      expect(put.stdout).toBe(`${digest}  ${path} (${png.length.toLocaleString('en')} bytes)\n`);
      expect(stored(digest, png.length)).toBe(true);
      const removed = await gpumeshRun(['blobs', 'rm', path, '--url', mesh().url], env);
      expect(removed.stdout).toBe(`${digest} deleted, ${png.length.toLocaleString('en')} bytes freed\n`);
      expect(stored(digest, png.length)).toBe(false);
      const again = await gpumeshRun(['blobs', 'rm', digest, '--url', mesh().url], env);
      expect(again.code).toBe(1);
      expect(again.output).toContain(`A file ${digest} stored by this grant was not found`);
      const neither = await gpumeshRun(['blobs', 'rm', join(dir, 'missing.png'), '--url', mesh().url], env);
      expect(neither.output).toContain('not a digest (sha256:<64 hex>) nor a file that can be read');
    } finally {
      removeDir(dir);
    }
  });
});
