import { once } from 'node:events';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { ApiError, MeshClient } from '../../../src/cli/common/client.js';
import type { JobEvent } from '../../../src/protocol/api/index.js';
import { freePort } from '../../helpers/processes.js';
import { standbyStandin } from '../../helpers/standby-standin.js';

/** A stand-in orchestrator answering with `handle`, counting what reached it. */
async function standin(handle: (request: IncomingMessage, response: ServerResponse, body: string) => void): Promise<{ url: string; requests: string[]; close(): Promise<void> }> {
  const requests: string[] = [];
  const server = createServer((request, response) => {
    requests.push(`${request.method} ${request.url}`);
    let body = '';
    request.on('data', (chunk: Buffer) => (body += chunk.toString()));
    request.on('end', () => handle(request, response, body));
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    requests,
    async close() {
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}

const json = (response: ServerResponse, status: number, value: unknown): void => {
  response.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(value));
};

async function rejection(promise: Promise<unknown>): Promise<ApiError> {
  try {
    await promise;
  } catch (error) {
    if (error instanceof ApiError) return error;
    throw error;
  }
  throw new Error('it did not fail');
}

describe('MeshClient with several orchestrator URLs (real sockets)', () => {
  const cleanup: (() => Promise<void>)[] = [];
  afterEach(async () => {
    for (const step of cleanup.splice(0)) await step();
  });
  /** A URL nothing listens on. Taken after the test's servers listen: taken before, the kernel could hand its port to one of them. */
  const dead = async (): Promise<string> => `http://127.0.0.1:${await freePort()}`;
  const standby = async (code?: 'NOT_LEADER' | 'STORE_UNAVAILABLE'): Promise<Awaited<ReturnType<typeof standbyStandin>>> => {
    const server = await standbyStandin({ code });
    cleanup.push(() => server.close());
    return server;
  };
  const active = async (handle: Parameters<typeof standin>[0]): Promise<Awaited<ReturnType<typeof standin>>> => {
    const server = await standin(handle);
    cleanup.push(() => server.close());
    return server;
  };

  it('skips a URL it cannot connect to and a standby (NOT_LEADER), and remembers the one that answered', async () => {
    const spare = await standby();
    const live = await active((request, response) => json(response, 200, { path: request.url }));
    const refused = await dead();
    const client = new MeshClient([refused, spare.url, live.url], 'grant');
    expect(await client.request('GET', '/v1/status')).toEqual({ path: '/v1/status' });
    expect(client.baseUrl).toBe(live.url);
    expect(await client.request('POST', '/v1/jobs', { type: 'image' })).toEqual({ path: '/v1/jobs' });
    // The second request started at the one that answered: the standby heard only the first.
    expect(spare.requests).toEqual(['GET /v1/status']);
    expect(live.requests).toEqual(['GET /v1/status', 'POST /v1/jobs']);
  });

  it('with no active one, fails with NOT_LEADER naming every URL it tried', async () => {
    const spare = await standby();
    const refused = await dead();
    const error = await rejection(new MeshClient([refused, spare.url], 'grant', { urlSource: '--url' }).request('GET', '/v1/status'));
    expect(error).toMatchObject({ status: 503, code: 'NOT_LEADER' });
    expect(error.message).toContain(`${refused}: cannot connect`);
    expect(error.message).toContain(`${spare.url}: NOT_LEADER`);
    expect(error.message).toContain('(from --url)');
    // One URL, a standby: the same error, naming it.
    const alone = await rejection(new MeshClient(spare.url, 'grant').request('GET', '/v1/status'));
    expect(alone).toMatchObject({ status: 503, code: 'NOT_LEADER' });
    expect(alone.message).toContain(`${spare.url}: NOT_LEADER`);
  });

  it('does not send elsewhere what the active one refused: a 400, or a 503 with another code', async () => {
    const spare = await standby();
    const strict = await active((_request, response) => json(response, 400, { error: { code: 'BAD_REQUEST', message: 'no' } }));
    expect(await rejection(new MeshClient([strict.url, spare.url], 'grant').request('POST', '/v1/jobs', {}))).toMatchObject({ status: 400, code: 'BAD_REQUEST' });
    const storeAway = await standby('STORE_UNAVAILABLE');
    expect(await rejection(new MeshClient([storeAway.url, spare.url], 'grant').request('POST', '/v1/jobs', {}))).toMatchObject({ status: 503, code: 'STORE_UNAVAILABLE' });
    expect(spare.requests).toEqual([]);
  });

  it('sends a GET on after a connection broke mid-way, but not a POST the first one may have carried out', async () => {
    const breaking = await active((_request, response) => response.socket?.destroy());
    const live = await active((request, response) => json(response, 200, { path: request.url }));
    const client = new MeshClient([breaking.url, live.url], 'grant');
    const error = await rejection(client.request('POST', '/v1/jobs', { type: 'image' }));
    expect(error.code).toBe('UNREACHABLE');
    expect(error.message).toContain(`broke during POST /v1/jobs`);
    expect(live.requests).toEqual([]);
    expect(await client.request('GET', '/v1/jobs/j1')).toEqual({ path: '/v1/jobs/j1' });
    expect(breaking.requests).toEqual(['POST /v1/jobs', 'GET /v1/jobs/j1']);
  });

  it('gives up on an orchestrator that accepts a request and never answers (a pulled cable): a GET goes on, a POST says so', async () => {
    // The stand-in reads each request and says nothing back, as a host whose cable was pulled (the kept-alive
    // connection takes the request; no answer ever comes).
    const silent = await active(() => {});
    const live = await active((request, response) => json(response, 200, { path: request.url }));
    const client = new MeshClient([silent.url, live.url], 'grant', { answerWithinMs: 300 });
    const started = Date.now();
    expect(await client.request('GET', '/v1/status')).toEqual({ path: '/v1/status' });
    expect(Date.now() - started).toBeLessThan(5_000);
    expect(silent.requests).toEqual(['GET /v1/status']);
    // A POST the silent one may have carried out is not sent on, and the error says why.
    const stuck = new MeshClient([silent.url, live.url], 'grant', { answerWithinMs: 300 });
    const error = await rejection(stuck.request('POST', '/v1/jobs', { type: 'image' }));
    expect(error.code).toBe('UNREACHABLE');
    expect(error.message).toContain('no answer within 0.3 s to POST /v1/jobs');
    expect(error.message).toContain('may have carried it out');
    expect(live.requests).toEqual(['GET /v1/status']);
    // One URL: the error names it and how to point elsewhere.
    const alone = await rejection(new MeshClient(silent.url, 'grant', { answerWithinMs: 300 }).request('GET', '/v1/status'));
    expect(alone.message).toContain(`the orchestrator at ${silent.url} sent no answer within 0.3 s to GET /v1/status`);
    expect(alone.message).toContain('--url');
  });

  it('times only the beginning of an answer: a body that streams past the limit is read whole, and a slow route gets its own limit', async () => {
    const slowBody = await active((_request, response) => {
      response.writeHead(200, { 'content-type': 'application/json' });
      response.write('{"path":');
      setTimeout(() => response.end('"late"}'), 600);
    });
    expect(await new MeshClient(slowBody.url, 'grant', { answerWithinMs: 200 }).request('GET', '/v1/x')).toEqual({ path: 'late' });
    const slowStart = await active((request, response) => setTimeout(() => json(response, 200, { path: request.url }), 500));
    expect(await new MeshClient(slowStart.url, 'grant', { answerWithinMs: 200 }).request('POST', '/v1/models/m/load', {}, { answerWithinMs: 5_000 }))
      .toEqual({ path: '/v1/models/m/load' });
  });

  it('follows a job on the next orchestrator when its event stream drops, with Last-Event-ID', async () => {
    const queued = { type: 'queued', jobId: 'j1', at: new Date().toISOString() };
    const running = { type: 'running', jobId: 'j1', host: 'h', at: new Date().toISOString() };
    const succeeded = { type: 'succeeded', jobId: 'j1', artifacts: [], result: null, at: new Date().toISOString() };
    const sse = (response: ServerResponse): void => {
      response.writeHead(200, { 'content-type': 'text/event-stream' });
    };
    // The first sends its snapshot and one live event, then dies mid-stream.
    const first = await active((_request, response) => {
      sse(response);
      response.write(`event: queued\ndata: ${JSON.stringify(queued)}\n\n`);
      response.write(`id: 41\nevent: running\ndata: ${JSON.stringify(running)}\n\n`, () => setTimeout(() => response.socket?.destroy(), 20));
    });
    let lastEventId: string | undefined;
    const second = await active((request, response) => {
      lastEventId = request.headers['last-event-id'] as string | undefined;
      sse(response);
      response.write(`event: queued\ndata: ${JSON.stringify(queued)}\n\n`);
      response.end(`id: 42\nevent: succeeded\ndata: ${JSON.stringify(succeeded)}\n\n`);
    });
    const heard: string[] = [];
    const terminal = await new MeshClient([first.url, second.url], 'grant').follow('j1', (event: JobEvent) => heard.push(event.type));
    expect(terminal.type).toBe('succeeded');
    expect(lastEventId).toBe('41');
    expect(heard).toEqual(['queued', 'running', 'queued', 'succeeded']); // the snapshot again after the reconnect
  });
});
