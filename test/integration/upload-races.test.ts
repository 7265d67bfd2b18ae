import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, readdirSync, readFileSync, utimesSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { QUOTE_LIMIT } from '../../src/protocol/errors.js';
import { removeDir, startMesh, tempDir, waitFor, type RunningMesh } from '../helpers/mesh.js';

/**
 * Issue 29, finding 5, against a real `gpumesh up --no-agent` over real sockets and its real staging folder: a DELETE
 * racing a `complete` or a chunk of the same upload (once a 500 from a file removed mid-completion, and 128 KB files
 * in blobs/staging that no record names, never reclaimed), the sweep that reclaims such files, and the cap on the
 * uploads one grant lineage may leave open (2,000 were accepted). Also the 409's offset (details and Upload-Offset)
 * and client text quoted back in an error, bounded.
 */
const ROUNDS = 40;
const CHUNK = 128 * 1024;
const CAP = 5;

let mesh: RunningMesh;
let data: string;
const staging = (): string => join(data, 'blobs', 'staging');
const stagingFiles = (): string[] => (existsSync(staging()) ? readdirSync(staging()).sort() : []);

beforeAll(async () => {
  data = tempDir();
  mesh = await startMesh({ data, args: ['--no-agent'], config: { uploads: { maxOpenPerGrant: CAP } } });
});
afterAll(async () => {
  await mesh?.stop();
  if (mesh) removeDir(mesh.data);
});

interface Answer { status: number; json: any; headers: Headers; text: string }

async function call(method: string, path: string, options: { grant?: string; body?: Uint8Array<ArrayBuffer> | string; headers?: Record<string, string> } = {}): Promise<Answer> {
  const response = await fetch(`${mesh.url}${path}`, {
    method, body: options.body, headers: { authorization: `Bearer ${options.grant ?? mesh.admin}`, ...options.headers },
  });
  const text = await response.text();
  let json: any = null;
  try { json = JSON.parse(text); } catch { /* not JSON */ }
  return { status: response.status, json, headers: response.headers, text };
}

const start = (grant?: string, body = '{}'): Promise<Answer> => call('POST', '/v1/uploads', { grant, body, headers: { 'content-type': 'application/json' } });
const chunk = (id: string, offset: number, bytes: Uint8Array<ArrayBuffer>): Promise<Answer> =>
  call('PATCH', `/v1/uploads/${id}`, { body: bytes, headers: { 'upload-offset': String(offset), 'content-type': 'application/octet-stream' } });
const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/** An upload left by a round (a DELETE that got its 409), given up now: DELETE until it is gone. */
async function giveUp(id: string): Promise<void> {
  await waitFor(async () => [204, 404].includes((await call('DELETE', `/v1/uploads/${id}`)).status), { what: `upload ${id} to be given up` });
}

describe('a DELETE racing the same upload', () => {
  it(`racing its completion, ${ROUNDS} rounds: never a 5xx, each answer one the docs name, and nothing left in blobs/staging`, async () => {
    const seen: string[] = [];
    for (let round = 0; round < ROUNDS; round++) {
      const { json } = await start();
      expect((await chunk(json.id, 0, Uint8Array.from(randomBytes(CHUNK)))).status).toBe(200);
      // One leaves up to 3 ms before the other, each way round, so the DELETE meets the completion at every step of it.
      const [completeAfter, deleteAfter] = stagger(round);
      const [completed, deleted] = await Promise.all([
        sleep(completeAfter).then(() => call('POST', `/v1/uploads/${json.id}/complete`)),
        sleep(deleteAfter).then(() => call('DELETE', `/v1/uploads/${json.id}`)),
      ]);
      seen.push(`${completed.status}/${deleted.status}`);
      expect(completed.status, completed.text).toBeLessThan(500);
      expect(deleted.status, deleted.text).toBeLessThan(500);
      expect([200, 404, 409]).toContain(completed.status);
      expect([204, 404, 409]).toContain(deleted.status);
      // One of them won: never both, never neither.
      expect(completed.status === 200 || deleted.status === 204, seen.at(-1)).toBe(true);
      expect(completed.status === 200 && deleted.status === 204, seen.at(-1)).toBe(false);
      for (const answer of [completed, deleted].filter((each) => each.status === 409)) {
        expect(answer.json.error).toMatchObject({ code: 'UPLOAD_CONFLICT', details: { offset: expect.any(Number) } });
        expect(answer.headers.get('upload-offset')).toBe(String(answer.json.error.details.offset));
      }
      await giveUp(json.id);
      expect(stagingFiles()).toEqual([]);
    }
    console.log(`DELETE racing complete, ${ROUNDS} rounds (complete/DELETE): ${tally(seen)}`);
  });

  it(`racing a chunk, ${ROUNDS} rounds: never a 5xx, and no file in blobs/staging that no upload names`, async () => {
    const seen: string[] = [];
    for (let round = 0; round < ROUNDS; round++) {
      const { json } = await start();
      const bytes = Uint8Array.from(randomBytes(CHUNK));
      const [chunkAfter, deleteAfter] = stagger(round);
      const [appended, deleted] = await Promise.all([
        sleep(chunkAfter).then(() => chunk(json.id, 0, bytes)).catch((error: Error) => ({ status: 0, text: error.message }) as Answer),
        sleep(deleteAfter).then(() => call('DELETE', `/v1/uploads/${json.id}`)),
      ]);
      seen.push(`${appended.status}/${deleted.status}`);
      expect(appended.status, appended.text).toBeLessThan(500);
      expect([200, 404, 409]).toContain(appended.status);
      expect([204, 404, 409]).toContain(deleted.status);
      // The state says what happened: given up (404), or whole, at the chunk's end.
      const after = await call('GET', `/v1/uploads/${json.id}`);
      if (deleted.status === 204) expect(after.status).toBe(404);
      else expect(after.json.offset).toBe(appended.status === 200 ? CHUNK : 0);
      // Whatever is in the staging folder is an upload's that is still open.
      for (const file of stagingFiles()) expect((await call('GET', `/v1/uploads/${file}`)).status, `${file} has no upload`).toBe(200);
      await giveUp(json.id);
      expect(stagingFiles()).toEqual([]);
    }
    console.log(`DELETE racing a chunk, ${ROUNDS} rounds (chunk/DELETE): ${tally(seen)}`);
  });

  it('a chunk at the wrong offset is 409 with the offset to resume from in details.offset and Upload-Offset', async () => {
    const { json } = await start();
    expect((await chunk(json.id, 0, Uint8Array.from(randomBytes(1000)))).status).toBe(200);
    const wrong = await chunk(json.id, 5, Uint8Array.from(randomBytes(10)));
    expect(wrong.status).toBe(409);
    expect(wrong.json.error).toEqual({ code: 'UPLOAD_CONFLICT', message: expect.stringContaining('send the next chunk from offset 1000'), details: { offset: 1000 } });
    expect(wrong.headers.get('upload-offset')).toBe('1000');
    // Completing before the announced size: the same.
    const sized = await start(undefined, JSON.stringify({ bytes: 50 }));
    expect((await chunk(sized.json.id, 0, Uint8Array.from(randomBytes(20)))).status).toBe(200);
    const early = await call('POST', `/v1/uploads/${sized.json.id}/complete`);
    expect(early.status).toBe(409);
    expect(early.json.error.details).toEqual({ offset: 20 });
    expect(early.headers.get('upload-offset')).toBe('20');
    await giveUp(json.id);
    await giveUp(sized.json.id);
  });
});

describe('open uploads per grant lineage', () => {
  const clientGrant = async (): Promise<string> =>
    (await call('POST', '/v1/grants', { body: JSON.stringify({ kind: 'client' }), headers: { 'content-type': 'application/json' } })).json.token as string;

  it(`a lineage may leave ${CAP} open (uploads.maxOpenPerGrant); the next is 429 TOO_MANY_UPLOADS saying what to do, until one ends`, async () => {
    const grant = await clientGrant();
    const open: string[] = [];
    for (let i = 0; i < CAP; i++) {
      const started = await start(grant);
      expect(started.status).toBe(201);
      open.push(started.json.id);
    }
    const refused = await start(grant);
    expect(refused.status).toBe(429);
    expect(refused.json.error.code).toBe('TOO_MANY_UPLOADS');
    expect(refused.json.error.message).toContain(`has ${CAP} resumable uploads open`);
    expect(refused.json.error.message).toContain('DELETE /v1/uploads/:id');
    expect(Number(refused.headers.get('retry-after'))).toBeGreaterThan(0);
    // Another lineage is not held to this one's count.
    const other = await start(await clientGrant());
    expect(other.status).toBe(201);
    // Completing one, or giving one up, makes room.
    expect((await call('POST', `/v1/uploads/${open[0]}/complete`, { grant })).status).toBe(200);
    expect((await start(grant)).status).toBe(201);
    expect((await start(grant)).status).toBe(429);
    expect((await call('DELETE', `/v1/uploads/${open[1]}`, { grant })).status).toBe(204);
    expect((await start(grant)).status).toBe(201);
  });

  it('20 starts at once from a fresh lineage: exactly the cap is let through', async () => {
    const grant = await clientGrant();
    const answers = await Promise.all(Array.from({ length: 20 }, () => start(grant)));
    expect(answers.filter((answer) => answer.status === 201)).toHaveLength(CAP);
    expect(answers.filter((answer) => answer.status === 429)).toHaveLength(20 - CAP);
  });
});

describe('client text in an error answer is bounded', () => {
  it('a 200 KB unknown key is quoted cut short, and the answer stays small', async () => {
    const key = 'k'.repeat(200 * 1024);
    const answer = await start(undefined, JSON.stringify({ [key]: 1 }));
    expect(answer.status).toBe(400);
    expect(answer.json.error.code).toBe('VALIDATION_FAILED');
    // Cut where the run without a space reaches QUOTE_LIMIT characters (its opening quote counts).
    expect(answer.json.error.message).toMatch(new RegExp(`"k{${QUOTE_LIMIT - 1}}…`));
    expect(answer.json.error.message).not.toContain('k'.repeat(QUOTE_LIMIT));
    expect(answer.text.length).toBeLessThan(1024);
  });

  it('a 200 KB multipart field name (an OpenAI edit) is quoted cut short, and the answer stays small', async () => {
    const form = new FormData();
    form.append('prompt', 'a lighthouse');
    form.append('f'.repeat(200 * 1024), new Blob([Uint8Array.from(randomBytes(64))], { type: 'image/png' }), 'x.png');
    const response = await fetch(`${mesh.url}/openai/v1/images/edits`, { method: 'POST', headers: { authorization: `Bearer ${mesh.admin}` }, body: form });
    const text = await response.text();
    expect(response.status).toBe(400);
    expect(text).toMatch(new RegExp(`f{${QUOTE_LIMIT - 1},${QUOTE_LIMIT}}…`));
    expect(text).not.toContain('f'.repeat(QUOTE_LIMIT + 1));
    expect(text.length).toBeLessThan(1024);
  });
});

describe('files in blobs/staging that no upload names', () => {
  it('are deleted at the start once older than the grace period; a fresh one and an open upload\'s file stay', async () => {
    const { json } = await start();
    expect((await chunk(json.id, 0, Uint8Array.from(randomBytes(4096)))).status).toBe(200);
    await mesh.stop();
    // What the old race left: a chunk's file whose upload was given up, hours ago; and one written a moment ago.
    mkdirSync(staging(), { recursive: true });
    const old = 'u_0123456789abcdef0123456789abcdef';
    const fresh = 'u_fedcba9876543210fedcba9876543210';
    writeFileSync(join(staging(), old), randomBytes(CHUNK));
    const hoursAgo = new Date(Date.now() - 3 * 3600 * 1000);
    utimesSync(join(staging(), old), hoursAgo, hoursAgo);
    writeFileSync(join(staging(), fresh), randomBytes(CHUNK));
    // An open upload's file, however old, is its bytes so far.
    utimesSync(join(staging(), json.id), hoursAgo, hoursAgo);
    expect(stagingFiles()).toEqual([old, fresh, json.id].sort());

    mesh = await startMesh({ data, args: ['--no-agent'] });
    expect(stagingFiles()).toEqual([fresh, json.id].sort());
    const logs = join(data, 'logs');
    expect(readdirSync(logs).map((file) => readFileSync(join(logs, file), 'utf8')).join('')).toMatch(/"files":1,"bytes":131072,.*deleted upload files that no upload names/);
    expect((await call('GET', `/v1/uploads/${json.id}`)).json.offset).toBe(4096);
  });
});

/** How long each of a round's two requests waits before it leaves: 0–3 ms for one of them, the other at once, in turn. */
function stagger(round: number): [number, number] {
  const lead = (round % 7) - 3;
  return lead < 0 ? [0, -lead] : [lead, 0];
}

/** "200/409 ×12, …": how often each pair of answers came. */
function tally(pairs: readonly string[]): string {
  const counts = new Map<string, number>();
  for (const pair of pairs) counts.set(pair, (counts.get(pair) ?? 0) + 1);
  return [...counts].map(([pair, count]) => `${pair} ×${count}`).join(', ');
}
