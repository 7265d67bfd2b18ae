import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { ApiError, createApi, GrantChanged } from '../../web/session.js';

/**
 * The pages' request helper (web/session.js) against a real HTTP server on loopback: an answer that arrives after
 * the page changed its grant belongs to the old grant. A late 401 for a mistyped grant once hid a gallery that a
 * good grant had just opened (a flaky browser test, test/browser/gallery.test.ts).
 */
let server: Server | undefined;
afterEach(async () => {
  await new Promise((resolve) => server?.close(resolve));
  server = undefined;
});

/** A server whose every answer waits for `release()`: 401 unless the bearer is `good`, else `{ ok: true }`. */
async function slowServer(): Promise<{ url: string; release: () => void; received: Promise<void> }> {
  let release!: () => void;
  const released = new Promise<void>((resolve) => { release = resolve; });
  let arrived!: () => void;
  const received = new Promise<void>((resolve) => { arrived = resolve; });
  server = createServer((request: IncomingMessage, response: ServerResponse) => {
    arrived();
    void released.then(() => {
      const good = request.headers.authorization === 'Bearer good';
      response.writeHead(good ? 200 : 401, { 'content-type': 'application/json' });
      response.end(JSON.stringify(good ? { ok: true } : { error: { code: 'GRANT_INVALID', message: 'not a grant' } }));
    });
  });
  await new Promise<void>((resolve) => server!.listen(0, '127.0.0.1', resolve));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, release, received };
}

describe('the pages\' request helper', () => {
  it('takes a 401 as a verdict on the grant it was sent with', async () => {
    const { url, release } = await slowServer();
    const onUnauthorized = vi.fn();
    const api = createApi(() => 'mistyped', { onUnauthorized });
    release();
    const error = await api(`${url}/v1/artifacts`).catch((caught: unknown) => caught);
    expect(error).toBeInstanceOf(ApiError);
    expect(error).not.toBeInstanceOf(GrantChanged);
    expect((error as ApiError).status).toBe(401);
    expect(onUnauthorized).toHaveBeenCalledWith('not a grant');
  });

  it('does not let a late 401 for a replaced grant ask for another', async () => {
    const { url, release, received } = await slowServer();
    let grant: string | null = 'mistyped';
    const onUnauthorized = vi.fn();
    const api = createApi(() => grant, { onUnauthorized });
    const late = api(`${url}/v1/jobs`).catch((caught: unknown) => caught);
    await received;
    grant = 'good'; // the user pasted a good grant while the old request was under way
    release();
    expect(await late).toBeInstanceOf(GrantChanged);
    expect(onUnauthorized).not.toHaveBeenCalled();
    expect(await api(`${url}/v1/jobs`)).toEqual({ ok: true });
  });

  it('drops a success that belongs to the grant the page had before', async () => {
    const { url, release, received } = await slowServer();
    let grant: string | null = 'good';
    const api = createApi(() => grant);
    const late = api(`${url}/v1/artifacts`).catch((caught: unknown) => caught);
    await received;
    grant = 'other';
    release();
    expect(await late).toBeInstanceOf(GrantChanged);
  });
});
