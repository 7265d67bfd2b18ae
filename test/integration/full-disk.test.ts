import { execFileSync } from 'node:child_process';
import { once } from 'node:events';
import { rmSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import Database from 'better-sqlite3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { gpumeshRun } from '../helpers/processes.js';
import { removeDir, startMesh, tempDir, waitFor, type RunningMesh } from '../helpers/mesh.js';

/**
 * Issue 29, finding 7: a full disk. With the data folder on a 40 MB filesystem, an upload that met ENOSPC was
 * answered 500 INTERNAL, and the server then kept that keep-alive connection open without reading it: the next submit
 * on it hung 73 s and was reset unstored, so the client could not tell whether it was accepted. Here a real `gpumesh
 * up` with its data folder on a 40 MB tmpfs: a write that meets the full disk is 507 STORAGE_FULL in each surface's
 * shape and the connection is closed or drained, never left half-read; below the floor (storage.minFreeMB) new work
 * is refused before anything is written, the status says so, and work is taken again by itself once space is back.
 * What already held must still hold: no crash, no lost job, SQLite intact, reads go on.
 */
const MB = 1024 * 1024;
/** A 40 MB filesystem, a floor of 16 MB: an upload of 60 MB passes the floor at its start and meets the full disk. */
const DISK_MB = 40;
const FLOOR_MB = 16;
const isRoot = process.getuid?.() === 0;

if (!isRoot) process.stdout.write('full-disk.test.ts: skipped — mounting a 40 MB tmpfs as the data folder needs root\n');

/** Bytes that are no picture (so nothing but the disk refuses them), `count` MiB of them, made as they are sent. */
const megabytes = (count: number, fill = 0x5a): Readable => Readable.from((function* () {
  for (let index = 0; index < count; index++) yield Buffer.alloc(MB, (fill + index) & 0xff);
})());

interface Answer { status: number; headers: http.IncomingHttpHeaders; body: string }

/** One request on `agent` (keep-alive, one socket), with its body streamed. */
function request(url: string, agent: http.Agent, options: http.RequestOptions, body?: Readable | Buffer): Promise<Answer> {
  return new Promise((resolve, reject) => {
    let answered = false;
    const sent = http.request(url, { ...options, agent, timeout: 20_000 }, (response) => {
      answered = true;
      let text = '';
      response.on('data', (part: Buffer) => (text += part.toString()));
      // A server that answers and closes while the body still goes out may cut the answer's end short on our side
      // (EPIPE): what arrived of it decides.
      const done = () => resolve({ status: response.statusCode!, headers: response.headers, body: text });
      response.on('end', done);
      response.on('close', done);
    });
    sent.on('error', (error) => { if (!answered) reject(error); });
    sent.on('timeout', () => sent.destroy(new Error('no answer within 20 s')));
    if (body instanceof Readable) body.pipe(sent);
    else sent.end(body);
  });
}

describe.skipIf(!isRoot)('a full disk is an answer, not a hang (issue 29, finding 7)', () => {
  let data: string;
  let mesh: RunningMesh;
  let mounted = false;
  const auth = () => ({ authorization: `Bearer ${mesh.admin}` });
  const submit = (agent: http.Agent, prompt: string) => request(`${mesh.url}/v1/jobs`, agent, {
    method: 'POST', headers: { ...auth(), 'content-type': 'application/json' },
  }, Buffer.from(JSON.stringify({ type: 'image', input: { prompt, width: 8, height: 8 } })));
  const code = (answer: Answer) => JSON.parse(answer.body).error.code as string;
  let before: string;

  beforeAll(async () => {
    data = tempDir('gpumesh-full-disk-');
    execFileSync('mount', ['-t', 'tmpfs', '-o', `size=${DISK_MB}m`, 'tmpfs', data]);
    mounted = true;
    mesh = await startMesh({ data, args: ['--no-agent'], config: { storage: { minFreeMB: FLOOR_MB } } });
    // A job accepted before the disk fills: it must still be there at the end.
    const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
    const accepted = await submit(agent, 'before the disk filled');
    agent.destroy();
    expect(accepted.status).toBe(202);
    before = JSON.parse(accepted.body).id;
  }, 60_000);

  afterAll(async () => {
    await mesh?.stop();
    if (mounted) execFileSync('umount', ['-l', data]);
    if (data) removeDir(data);
  });

  it('an upload that meets the full disk is 507 STORAGE_FULL, and the next submit on the same keep-alive connection is answered at once', async () => {
    const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
    try {
      const upload = await request(`${mesh.url}/v1/blobs`, agent, {
        method: 'PUT', headers: { ...auth(), 'content-type': 'application/octet-stream', 'content-length': String(60 * MB) },
      }, megabytes(60));
      expect(upload.status).toBe(507);
      expect(code(upload)).toBe('STORAGE_FULL');
      expect(JSON.parse(upload.body).error.message).toMatch(/disk is full \(no space is left on the device, ENOSPC\): this request was not accepted/);
      // Its body was part read: the connection closes after the answer instead of waiting on the rest.
      expect(upload.headers.connection).toBe('close');
      const started = Date.now();
      const next = await submit(agent, 'right after the full disk');
      expect(Date.now() - started).toBeLessThan(5000);
      // Answered and stored: the upload's part file was removed, so the disk has room again.
      expect(next.status).toBe(202);
      expect((await fetch(`${mesh.url}/v1/jobs/${JSON.parse(next.body).id}`, { headers: auth() })).status).toBe(200);
    } finally {
      agent.destroy();
    }
  }, 60_000);

  /**
   * On a raw socket: an upload of `megabytesSent` MiB that meets the full disk, then — on the same connection, if it
   * is still open — `GET /healthz`; what came back, and whether the server closed the connection, within 10 s (an
   * answer to the second request would do as well as the close: either way nothing waits).
   */
  async function uploadThenNext(megabytesSent: number): Promise<{ received: string; closed: boolean }> {
    const { port } = new URL(mesh.url);
    const socket = net.connect(Number(port), '127.0.0.1');
    await once(socket, 'connect');
    let received = '';
    socket.on('data', (part: Buffer) => (received += part.toString('latin1')));
    socket.on('error', () => { /* EPIPE or a reset while the body still goes out: the bytes received decide */ });
    let closed = false;
    const close = new Promise<void>((resolve) => socket.once('close', () => { closed = true; resolve(); }));
    socket.write(`PUT /v1/blobs HTTP/1.1\r\nHost: mesh\r\nAuthorization: Bearer ${mesh.admin}\r\nContent-Type: application/octet-stream\r\nContent-Length: ${megabytesSent * MB}\r\n\r\n`);
    for await (const part of megabytes(megabytesSent, 0x11)) {
      if (socket.destroyed) break;
      if (socket.write(part)) continue;
      // A server that stopped reading (the old answer to a full disk) never drains: give up writing after 10 s.
      const drained = await new Promise<boolean>((resolve) => {
        // Each wait takes its listeners and its timer back: one wait per chunk would otherwise pile them on the socket.
        const settle = (value: boolean): void => {
          socket.off('drain', onward).off('close', onward);
          clearTimeout(timer);
          resolve(value);
        };
        const onward = (): void => settle(true);
        const timer = setTimeout(() => settle(false), 10_000);
        socket.once('drain', onward).once('close', onward);
      });
      if (!drained) break;
    }
    if (!socket.destroyed) socket.write('GET /healthz HTTP/1.1\r\nHost: mesh\r\n\r\n');
    await Promise.race([close, waitFor(() => /HTTP\/1\.1 200 [\s\S]*"ok":true/.test(received), { timeoutMs: 10_000 }).catch(() => undefined)]);
    socket.destroy();
    return { received, closed };
  }

  it('on a raw socket: the 507 comes with Connection: close, and the server really closes the connection — the next request is never left waiting', async () => {
    const started = Date.now();
    const { received, closed } = await uploadThenNext(60);
    expect(received).toMatch(/^HTTP\/1\.1 507 /);
    expect(received).toContain('"code":"STORAGE_FULL"');
    expect(received).toMatch(/connection: close/i);
    expect(closed).toBe(true);
    expect(Date.now() - started).toBeLessThan(10_000);
  }, 60_000);

  it('an OpenAI edit and a resumable upload that meet the full disk are 507 too, each in its surface\'s shape', async () => {
    const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
    try {
      const boundary = 'full-disk';
      const head = Buffer.from(`--${boundary}\r\nContent-Disposition: form-data; name="prompt"\r\n\r\nsnow\r\n--${boundary}\r\nContent-Disposition: form-data; name="image"; filename="a.png"\r\nContent-Type: image/png\r\n\r\n`);
      const tail = Buffer.from(`\r\n--${boundary}--\r\n`);
      const edit = await request(`${mesh.url}/openai/v1/images/edits`, agent, {
        method: 'POST', headers: { ...auth(), 'content-type': `multipart/form-data; boundary=${boundary}`, 'content-length': String(head.length + 60 * MB + tail.length) },
      }, Readable.from((async function* () {
        yield head;
        yield* megabytes(60, 0x22);
        yield tail;
      })()));
      expect(edit.status).toBe(507);
      expect(JSON.parse(edit.body).error).toMatchObject({ code: 'STORAGE_FULL', type: 'server_error' });

      const created = await request(`${mesh.url}/v1/uploads`, agent, { method: 'POST', headers: { ...auth(), 'content-type': 'application/json' } }, Buffer.from('{}'));
      expect(created.status).toBe(201);
      const { id } = JSON.parse(created.body) as { id: string };
      const chunk = await request(`${mesh.url}/v1/uploads/${id}`, agent, {
        method: 'PATCH', headers: { ...auth(), 'content-type': 'application/octet-stream', 'upload-offset': '0', 'content-length': String(60 * MB) },
      }, megabytes(60, 0x33));
      expect(chunk.status).toBe(507);
      expect(code(chunk)).toBe('STORAGE_FULL');
      expect((await request(`${mesh.url}/v1/uploads/${id}`, agent, { method: 'DELETE', headers: auth() })).status).toBe(204);
    } finally {
      agent.destroy();
    }
  }, 60_000);

  it('below the floor new work is refused before anything is written, the status says the disk is low, and work resumes by itself once space is back', async () => {
    const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
    // Most of the disk taken by something else: less than the 16 MB floor left.
    const ballast = join(data, 'ballast');
    writeFileSync(ballast, Buffer.alloc(30 * MB, 1));
    try {
      const disk = await waitFor(async () => {
        const storage = await (await fetch(`${mesh.url}/v1/storage`, { headers: auth() })).json() as { disk: { low: boolean; freeBytes: number; minFreeBytes: number } };
        return storage.disk.low ? storage.disk : null;
      }, { what: 'GET /v1/storage to say the disk is low' });
      expect(disk.freeBytes).toBeLessThan(FLOOR_MB * MB);
      expect(disk.minFreeBytes).toBe(FLOOR_MB * MB);
      const status = await (await fetch(`${mesh.url}/v1/status`, { headers: auth() })).json() as { disk: { low: boolean } };
      expect(status.disk.low).toBe(true);
      const cli = await gpumeshRun(['status', '--url', mesh.url], { GPUMESH_GRANT: mesh.admin });
      expect(cli.output).toMatch(/disk LOW: .* free of .*, below the floor of 16\.0 MiB \(storage\.minFreeMB\)/);

      // Every route of new work: refused with STORAGE_FULL in its surface's shape, its body never read.
      const json = (value: unknown) => Buffer.from(JSON.stringify(value));
      const jsonHeaders = { ...auth(), 'content-type': 'application/json' };
      const blob = await request(`${mesh.url}/v1/blobs`, agent, { method: 'PUT', headers: { ...auth(), 'content-type': 'application/octet-stream' } }, Buffer.alloc(4096, 3));
      expect([blob.status, code(blob)]).toEqual([507, 'STORAGE_FULL']);
      expect(blob.body).toMatch(/below the floor of 16 MB \(storage\.minFreeMB\)/);
      for (const [path, body] of [
        ['/v1/jobs', { type: 'image', input: { prompt: 'refused', width: 8, height: 8 } }],
        ['/v1/jobs:batch', { jobs: [{ type: 'image', input: { prompt: 'refused' } }] }],
        ['/v1/uploads', {}],
        ['/v1/models', { name: 'refused', engine: 'exec', types: ['tensor'], file: `sha256:${'0'.repeat(64)}` }],
      ] as const) {
        const answer = await request(`${mesh.url}${path}`, agent, { method: 'POST', headers: jsonHeaders }, json(body));
        expect([path, answer.status, code(answer)]).toEqual([path, 507, 'STORAGE_FULL']);
      }
      const infer = await request(`${mesh.url}/v2/models/simple/infer`, agent, { method: 'POST', headers: jsonHeaders }, json({ inputs: [] }));
      expect(infer.status).toBe(507);
      expect(JSON.parse(infer.body)).toEqual({ error: expect.stringMatching(/^The orchestrator's disk is full \(.*below the floor/) });
      const generation = await request(`${mesh.url}/openai/v1/images/generations`, agent, { method: 'POST', headers: jsonHeaders }, json({ prompt: 'refused' }));
      expect(generation.status).toBe(507);
      expect(JSON.parse(generation.body).error).toMatchObject({ code: 'STORAGE_FULL', type: 'server_error' });
      for (const path of ['/sdapi/v1/txt2img', '/sdapi/v1/img2img']) {
        const a1111 = await request(`${mesh.url}${path}`, agent, { method: 'POST', headers: jsonHeaders }, json({ prompt: 'refused', init_images: ['aGk='] }));
        expect([path, a1111.status, JSON.parse(a1111.body).error]).toEqual([path, 507, 'STORAGE_FULL']);
      }
      // Nothing of the refused requests reached the disk: no part file waits in the spool.
      expect(execFileSync('ls', ['-A', join(data, 'blobs', 'incoming')]).toString()).toBe('');

      // Reads, cancels and deletes go on.
      expect((await request(`${mesh.url}/v1/jobs/${before}`, agent, { method: 'GET', headers: auth() })).status).toBe(200);
      expect((await request(`${mesh.url}/v1/jobs?limit=5`, agent, { method: 'GET', headers: auth() })).status).toBe(200);
      expect((await request(`${mesh.url}/healthz`, agent, { method: 'GET' })).status).toBe(200);
    } finally {
      rmSync(ballast, { force: true });
    }
    // Space is back: the next submit is taken (the floor measures again at most a second later), with nothing restarted.
    const resumed = await waitFor(async () => {
      const answer = await submit(agent, 'space is back');
      return answer.status === 202 ? answer : null;
    }, { timeoutMs: 10_000, intervalMs: 200, what: 'a submit to be taken once space is back' });
    expect(JSON.parse(resumed.body).status).toBe('queued');
    const storage = await (await fetch(`${mesh.url}/v1/storage`, { headers: auth() })).json() as { disk: { low: boolean } };
    expect(storage.disk.low).toBe(false);
    agent.destroy();
  }, 60_000);

  it('nothing was lost: the orchestrator never exited, the job accepted before is there, and SQLite is intact', async () => {
    expect(mesh.process.exitCode).toBeNull();
    expect(mesh.output()).not.toMatch(/"level":(50|60)[^\n]*ENOSPC/);
    const job = await (await fetch(`${mesh.url}/v1/jobs/${before}`, { headers: auth() })).json() as { id: string; status: string };
    expect(job).toMatchObject({ id: before, status: 'queued' });
    await mesh.stop();
    const db = new Database(join(data, 'store.sqlite'), { readonly: true });
    try {
      expect(db.pragma('integrity_check', { simple: true })).toBe('ok');
      expect((db.prepare('SELECT count(*) AS n FROM jobs WHERE id = ?').get(before) as { n: number }).n).toBe(1);
    } finally {
      db.close();
    }
  }, 60_000);
});

describe.skipIf(!isRoot)('a commit that meets a full disk is an answer too, and the orchestrator goes on (issue 29, finding 7)', () => {
  let data: string;
  let mesh: RunningMesh;
  let mounted = false;

  beforeAll(async () => {
    data = tempDir('gpumesh-full-store-');
    execFileSync('mount', ['-t', 'tmpfs', '-o', `size=${DISK_MB}m`, 'tmpfs', data]);
    mounted = true;
    // No floor: the disk is filled by something else, to the last byte, between two of the floor's measures.
    mesh = await startMesh({ data, args: ['--no-agent'], config: { storage: { minFreeMB: 0 } } });
  }, 60_000);

  afterAll(async () => {
    await mesh?.stop();
    if (mounted) execFileSync('umount', ['-l', data]);
    if (data) removeDir(data);
  });

  it('a submit whose commit meets SQLITE_FULL is 507 STORAGE_FULL and its job is not kept; once space is back the next is taken', async () => {
    const headers = { authorization: `Bearer ${mesh.admin}`, 'content-type': 'application/json' };
    const submit = (prompt: string) => fetch(`${mesh.url}/v1/jobs`, { method: 'POST', headers, body: JSON.stringify({ type: 'image', input: { prompt, width: 8, height: 8 } }) });
    const ballast = join(data, 'ballast');
    // Every byte taken (the write stops at the end of the disk).
    try {
      writeFileSync(ballast, Buffer.alloc((DISK_MB + 8) * MB, 1));
    } catch (error) {
      expect((error as NodeJS.ErrnoException).code).toBe('ENOSPC');
    }
    try {
      const refused = await submit('the store is full');
      expect(refused.status).toBe(507);
      expect(await refused.json()).toEqual({ error: { code: 'STORAGE_FULL', message: expect.stringContaining('(the store\'s database cannot grow, SQLITE_FULL): this request was not accepted') } });
      // Thrown where the group commit runs, the error once ended the process.
      expect(mesh.process.exitCode).toBeNull();
      expect((await fetch(`${mesh.url}/healthz`)).status).toBe(200);
    } finally {
      rmSync(ballast, { force: true });
    }
    const taken = await waitFor(async () => {
      const answer = await submit('space is back');
      return answer.status === 202 ? (await answer.json()) as { id: string } : null;
    }, { timeoutMs: 10_000, intervalMs: 200, what: 'a submit to be taken once space is back' });
    // The refused job was taken back: only the one taken is there.
    const listed = await (await fetch(`${mesh.url}/v1/jobs?limit=10`, { headers })).json() as { jobs: { id: string; input: { prompt: string } }[] };
    expect(listed.jobs.map((job) => job.input.prompt)).toEqual(['space is back']);
    expect(listed.jobs[0]!.id).toBe(taken.id);
    await mesh.stop();
    const db = new Database(join(data, 'store.sqlite'), { readonly: true });
    try {
      expect(db.pragma('integrity_check', { simple: true })).toBe('ok');
    } finally {
      db.close();
    }
  }, 60_000);
});
