import Database from 'better-sqlite3';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import sharp from 'sharp';
import { afterAll, describe, expect, it } from 'vitest';
import { blobDirEntries, blobEntry } from '../helpers/blob-dir.js';
import { removeDir, startMesh, tempDir, type RunningMesh } from '../helpers/mesh.js';

/**
 * The job retention in a real `gpumesh up`: jobs run, the mesh stops, their rows are aged past `jobs.retentionDays`
 * in its SQLite file (the one thing a test cannot wait a week for), and the mesh started again deletes, at its start,
 * the finished jobs no result names — a tensor job; an image job whose results were deleted, and with it the picture
 * it started from, which only its row still named — keeps the job whose picture is in the gallery, and says so in its log.
 */
const data = tempDir();
let mesh: RunningMesh | undefined;
afterAll(async () => {
  await mesh?.stop();
  removeDir(data);
});

async function call(method: string, path: string, body?: unknown): Promise<{ status: number; json: any }> {
  const response = await fetch(`${mesh!.url}${path}`, {
    method, body: body === undefined ? undefined : JSON.stringify(body),
    headers: { authorization: `Bearer ${mesh!.admin}`, ...(body === undefined ? {} : { 'content-type': 'application/json', prefer: 'wait=30' }) },
  });
  return { status: response.status, json: await response.json() };
}

describe('finished jobs past their retention', () => {
  it('are deleted when the mesh starts (a tensor job; an image job whose results were deleted, with the picture only it named); a job with results stays', async () => {
    mesh = await startMesh({ data, config: { jobs: { retentionDays: 7 } } });
    const tensor = await call('POST', '/v1/jobs', { type: 'tensor', input: { x: Array.from({ length: 64 }, () => 0.5) } });
    const shown = await call('POST', '/v1/jobs', { type: 'image', input: { prompt: 'kept in the gallery', width: 64, height: 64, steps: 2 } });
    // A client's picture, a job started from it, the job's results deleted, then the picture: the job's row is all
    // that still names it.
    const png = await sharp({ create: { width: 48, height: 32, channels: 3, background: '#3a6ea5' } }).png().toBuffer();
    const stored = await fetch(`${mesh.url}/v1/blobs`, { method: 'PUT', body: Uint8Array.from(png), headers: { authorization: `Bearer ${mesh.admin}`, 'content-type': 'image/png' } });
    const picture = await stored.json() as { digest: string; bytes: number };
    const started = await call('POST', '/v1/jobs', { type: 'image', input: { prompt: 'from a picture', image: picture.digest, strength: 0.5 } });
    for (const job of [tensor, shown, started]) expect(job.json.status, JSON.stringify(job.json.error)).toBe('succeeded');
    expect((await call('DELETE', `/v1/jobs/${started.json.id}/artifacts`)).json).toMatchObject({ freed: [started.json.artifacts[0].digest] });
    expect((await call('DELETE', `/v1/blobs/${picture.digest}`)).json).toMatchObject({ freed: false });
    expect(blobDirEntries(data)).toContain(blobEntry(picture.digest, picture.bytes));
    await mesh.stop();

    // A week and a day later.
    const db = new Database(join(data, 'store.sqlite'));
    db.prepare('UPDATE jobs SET created_at = created_at - ?, finished_at = finished_at - ?').run(8 * 86_400_000, 8 * 86_400_000);
    db.close();

    mesh = await startMesh({ data, config: { jobs: { retentionDays: 7 } } });
    await expect.poll(async () => (await call('GET', `/v1/jobs/${tensor.json.id}`)).status, { timeout: 10_000 }).toBe(404);
    expect((await call('GET', `/v1/jobs/${started.json.id}`)).status).toBe(404);
    expect((await call('GET', `/v1/jobs/${shown.json.id}`)).json).toMatchObject({ status: 'succeeded', artifacts: [{ digest: shown.json.artifacts[0].digest }] });
    // The rows go first, their files after a pause as long as the delete took (JobRetention): the sweep has ended
    // when it says so in the log.
    const logs = (): string => readdirSync(join(data, 'logs')).map((name) => readFileSync(join(data, 'logs', name), 'utf8')).join('');
    await expect.poll(logs, { timeout: 10_000 }).toMatch(/"jobs":2,.*"days":7,.*"msg":"deleted finished jobs past their retention"/);
    expect(blobDirEntries(data)).not.toContain(blobEntry(picture.digest, picture.bytes));
    expect(blobDirEntries(data)).toContain(blobEntry(shown.json.artifacts[0].digest, shown.json.artifacts[0].bytes));
  });
});
