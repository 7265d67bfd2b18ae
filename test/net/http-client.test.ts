import { once } from 'node:events';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { Backoff } from '../../src/net/backoff.js';
import { HttpFailure, httpFetch, httpRequest, retrying } from '../../src/net/http-client.js';
import { FakeClock } from '../helpers/fake-clock.js';
import { freePort } from '../helpers/processes.js';

/** A server answering with `handle`, on a real socket; closed after each test. */
const servers: { close(): Promise<void> }[] = [];
async function serve(handle: (request: IncomingMessage, response: ServerResponse) => void): Promise<string> {
  const server = createServer(handle);
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  servers.push({
    async close() {
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
    },
  });
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}
afterEach(async () => {
  for (const server of servers.splice(0)) await server.close();
});

describe('the one outbound HTTP client (real sockets)', () => {
  it('reads a whole answer of any status, sending an in-memory body with its length', async () => {
    const url = await serve((request, response) => {
      let body = '';
      request.on('data', (chunk: Buffer) => (body += chunk.toString()));
      request.on('end', () => response.writeHead(418, { 'x-length': request.headers['content-length'] ?? 'none' }).end(`got ${body}`));
    });
    const answer = await httpRequest(`${url}/x`, { method: 'POST', body: 'hello' });
    expect(answer).toMatchObject({ status: 418, text: 'got hello', headers: { 'x-length': '5' } });
  });

  it('says why there is no answer: nothing listening (unreachable), a connection dropped, a timeout, an answer too large', async () => {
    const nowhere = await httpRequest(`http://127.0.0.1:${await freePort()}/`).catch((error: unknown) => error);
    expect(nowhere).toBeInstanceOf(HttpFailure);
    expect(nowhere).toMatchObject({ kind: 'unreachable', code: 'ECONNREFUSED' });
    const dropping = await serve((request) => request.socket.destroy());
    await expect(httpRequest(dropping, { method: 'POST', body: 'x' })).rejects.toMatchObject({ kind: 'dropped', status: null });
    const silent = await serve(() => {});
    await expect(httpRequest(silent, { timeoutMs: 100 })).rejects.toMatchObject({ kind: 'timeout', message: 'no answer within 100 ms' });
    const large = await serve((_request, response) => response.end('x'.repeat(10_000)));
    await expect(httpRequest(large, { maxBytes: 1000 })).rejects.toMatchObject({ kind: 'too-large', message: 'the answer is larger than 1000 bytes' });
  });

  it('an aborted request rejects with the signal\'s reason', async () => {
    const silent = await serve(() => {});
    const controller = new AbortController();
    const pending = httpRequest(silent, { signal: controller.signal });
    controller.abort(new Error('cancelled'));
    await expect(pending).rejects.toThrow('cancelled');
  });

  it('streams an answer as a Response, following redirects only when asked, without the grant off the origin', async () => {
    const seen: (string | undefined)[] = [];
    const target = await serve((request, response) => {
      seen.push(request.headers.authorization);
      response.end(`arrived by ${request.method}`);
    });
    const origin = await serve((request, response) => {
      if (request.url === '/see-other') return void response.writeHead(303, { location: `${target}/there` }).end();
      response.writeHead(307, { location: `${target}/there` }).end();
    });
    const headers = { authorization: 'Bearer grant' };
    expect((await httpFetch(`${origin}/moved`, { headers })).status).toBe(307);
    const followed = await httpFetch(`${origin}/moved`, { headers, redirects: 5 });
    expect([followed.status, await followed.text()]).toEqual([200, 'arrived by GET']);
    const posted = await httpFetch(`${origin}/see-other`, { method: 'POST', body: 'x', headers, redirects: 5 });
    expect(await posted.text()).toBe('arrived by GET');
    expect(seen).toEqual([undefined, undefined]);
  });
});

describe('retrying', () => {
  it('waits the backoff between attempts, or what an attempt makes of it, and throws the last failure when the retries are spent', async () => {
    const clock = new FakeClock(0);
    const waits: number[] = [];
    const setTimer = clock.setTimer.bind(clock);
    clock.setTimer = (ms, fn) => {
      waits.push(ms);
      return setTimer(ms, fn);
    };
    let attempts = 0;
    const result = retrying({ retries: 3, backoff: { initialMs: 100, maxMs: 1000 }, clock }, async (index) => {
      attempts++;
      return { failure: new Error(`attempt ${index}`), retry: true, ...(index === 1 ? { wait: (ms: number) => ms * 10 } : {}) };
    });
    result.catch(() => {});
    for (let i = 0; i < 10; i++) {
      await new Promise((resolve) => setImmediate(resolve));
      clock.advance(10_000);
    }
    await expect(result).rejects.toThrow('attempt 3');
    expect(attempts).toBe(4);
    expect(waits).toEqual([100, 2000, 400]);
  });

  it('stops at a failure no retry mends, and resolves with the first value', async () => {
    const clock = new FakeClock(0);
    await expect(retrying({ retries: 5, backoff: { initialMs: 1, maxMs: 1 }, clock }, async () => ({ failure: new Error('final'), retry: false }))).rejects.toThrow('final');
    await expect(retrying({ retries: 5, backoff: { initialMs: 1, maxMs: 1 }, clock }, async () => ({ value: 42 }))).resolves.toBe(42);
  });
});

describe('Backoff', () => {
  it('grows by its factor to its ceiling and starts over on reset; with jitter it stays within the ceiling', () => {
    const backoff = new Backoff({ initialMs: 100, maxMs: 1000, factor: 1.5 });
    expect([1, 2, 3, 4, 5, 6, 7].map(() => backoff.next())).toEqual([100, 150, 225, 337.5, 506.25, 759.375, 1000]);
    backoff.reset();
    expect(backoff.next()).toBe(100);
    const jittered = new Backoff({ initialMs: 200, maxMs: 5000, jitter: true });
    for (let i = 0; i < 20; i++) expect(jittered.next()).toBeLessThanOrEqual(5000);
  });
});
