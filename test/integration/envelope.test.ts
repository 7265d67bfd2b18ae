import net from 'node:net';
import { describe, expect, it } from 'vitest';
import { ERRORS } from '../../src/protocol/index.js';
import { meshForFile } from '../helpers/mesh.js';

/**
 * One envelope for every answer, and the grant before the body: regression tests
 * for what was found by hand and by the fuzzer (test/integration/fuzz.test.ts),
 * against a real `gpumesh up --no-agent` process.
 */
const running = meshForFile({ args: ['--no-agent'] });

interface Answer { status: number; headers: Headers; json: any; text: string }

async function call(method: string, path: string, options: { grant?: string | null; body?: string; headers?: Record<string, string> } = {}): Promise<Answer> {
  const grant = options.grant === undefined ? running().admin : options.grant;
  const headers: Record<string, string> = { ...options.headers };
  if (grant) headers.authorization = `Bearer ${grant}`;
  const response = await fetch(`${running().url}${path}`, { method, headers, body: options.body, signal: AbortSignal.timeout(10_000) });
  const text = method === 'HEAD' ? '' : await response.text();
  let json: any = null;
  try { json = JSON.parse(text); } catch { /* not JSON */ }
  return { status: response.status, headers: response.headers, json, text };
}

/** The answer is the envelope with this code, at the status the registry gives it. */
function expectEnvelope(answer: Answer, code: keyof typeof ERRORS, mention?: string): void {
  expect(answer.status, answer.text).toBe(ERRORS[code].status);
  expect(answer.headers.get('content-type')).toMatch(/^application\/json/);
  expect(Object.keys(answer.json)).toEqual(['error']);
  expect(Object.keys(answer.json.error).sort()).toEqual(['code', 'message']);
  expect(answer.json.error.code).toBe(code);
  if (mention) expect(answer.json.error.message).toContain(mention);
}

/** Bytes on a bare TCP socket (what no HTTP client sends); the first answer's status and JSON body. */
async function raw(request: string): Promise<{ status: number; json: any; text: string }> {
  const { hostname, port } = new URL(running().url);
  const received = await new Promise<string>((resolve, reject) => {
    const chunks: Buffer[] = [];
    const socket = net.connect(Number(port), hostname, () => socket.end(request));
    socket.on('data', (chunk: Buffer) => chunks.push(chunk));
    socket.on('error', reject);
    socket.on('close', () => resolve(Buffer.concat(chunks).toString()));
    socket.setTimeout(10_000, () => socket.destroy(new Error('no answer')));
  });
  const status = Number(/^HTTP\/1\.1 (\d{3})/.exec(received)?.[1]);
  const body = received.slice(received.indexOf('\r\n\r\n') + 4);
  let json: any = null;
  try { json = JSON.parse(body); } catch { /* not JSON */ }
  return { status, json, text: received };
}

describe("Fastify's own answers are in the envelope", () => {
  it('a path parameter over the schema limit is a 400 naming it; over the router limit a 414 URI_TOO_LONG', async () => {
    expectEnvelope(await call('GET', `/v1/jobs/${'a'.repeat(101)}`), 'INVALID_PATH_PARAMETER', 'The path parameter id is invalid: ');
    expectEnvelope(await call('GET', `/v1/jobs/${'a'.repeat(1001)}`), 'URI_TOO_LONG', '1000');
  });

  it('a path that is not valid percent-encoding is a 400 BAD_REQUEST', async () => {
    expectEnvelope(await call('GET', '/v1/jobs/%ff'), 'BAD_REQUEST', 'percent-encoding');
  });

  it('a plain GET on the WebSocket route is a 426 UPGRADE_REQUIRED (after its grant check)', async () => {
    const plain = await call('GET', '/v1/agents/link');
    expectEnvelope(plain, 'UPGRADE_REQUIRED');
    expect(plain.headers.get('upgrade')).toBe('websocket');
    expect((await call('HEAD', '/v1/agents/link')).status).toBe(426);
    expectEnvelope(await call('GET', '/v1/agents/link', { grant: null }), 'GRANT_MISSING');
  });

  it('an unknown method and headers over the limit are answered on the socket in the envelope', async () => {
    const method = await raw('FOO /v1/jobs HTTP/1.1\r\nhost: x\r\n\r\n');
    expect(method.status).toBe(400);
    expect(method.json.error.code).toBe('BAD_REQUEST');
    const headers = await raw(`GET /healthz HTTP/1.1\r\nhost: x\r\nx-big: ${'b'.repeat(20_000)}\r\n\r\n`);
    expect(headers.status).toBe(431);
    expect(headers.json.error).toEqual({ code: 'HEADERS_TOO_LARGE', message: 'The request line and headers are larger than the limit of 16384 bytes' });
  });

  it('plain text on a JSON route is a 415, not a string to validate', async () => {
    expectEnvelope(await call('POST', '/v1/jobs', { body: 'prompt', headers: { 'content-type': 'text/plain' } }), 'UNSUPPORTED_MEDIA_TYPE', 'text/plain');
  });

  it('a gallery folder and a range outside a file are answered in the envelope', async () => {
    expectEnvelope(await call('GET', '/web/', { grant: null }), 'ROUTE_NOT_FOUND');
    expectEnvelope(await call('GET', '/web/gallery.js', { grant: null, headers: { range: 'bytes=99999999-' } }), 'RANGE_NOT_SATISFIABLE');
  });
});

describe('validation says where', () => {
  it('path, query and body errors are worded for where they are', async () => {
    expectEnvelope(await call('GET', `/v1/jobs/${'x'.repeat(150)}/events`), 'INVALID_PATH_PARAMETER', 'The path parameter id is invalid: Too big');
    const query = await call('GET', '/v1/jobs?limit=abc');
    expectEnvelope(query, 'INVALID_QUERY_PARAMETER', 'The query parameter limit is invalid: ');
    expect(query.json.error.message).not.toContain('body');
    expectEnvelope(await call('GET', '/v1/jobs?status=bogus'), 'INVALID_QUERY_PARAMETER', 'The query parameter status is invalid: unknown status bogus');
    const body = await call('POST', '/v1/jobs', { body: JSON.stringify({ type: 'image' }), headers: { 'content-type': 'application/json' } });
    expectEnvelope(body, 'VALIDATION_FAILED', 'The request body is invalid: input: ');
  });
});

describe('the grant is checked before the body', () => {
  const json = { 'content-type': 'application/json' };

  it('no grant is a 401 whatever the body: invalid, malformed, of another type, or too large', async () => {
    expectEnvelope(await call('POST', '/v1/jobs', { grant: null, body: '{"x":1}', headers: json }), 'GRANT_MISSING');
    expectEnvelope(await call('POST', '/v1/jobs', { grant: null, body: '{"type":', headers: json }), 'GRANT_MISSING');
    expectEnvelope(await call('POST', '/v1/grants', { grant: null, body: 'kind=admin', headers: { 'content-type': 'application/x-www-form-urlencoded' } }), 'GRANT_MISSING');
    expectEnvelope(await call('POST', '/v1/jobs', { grant: null, body: `{"p":"${'x'.repeat(2 * 1024 * 1024)}"}`, headers: json }), 'GRANT_MISSING');
    expectEnvelope(await call('GET', `/v1/jobs/${'a'.repeat(101)}`, { grant: null }), 'GRANT_MISSING');
    expectEnvelope(await call('GET', '/v1/jobs?limit=abc', { grant: 'garbage' }), 'GRANT_INVALID');
  });

  it('a grant that cannot use the route is refused before its body is looked at', async () => {
    const agent = (await call('POST', '/v1/grants', { body: JSON.stringify({ kind: 'agent', host: 'h1' }), headers: json })).json.token as string;
    expectEnvelope(await call('POST', '/v1/jobs', { grant: agent, body: '{"x":1}', headers: json }), 'GRANT_DENIED');
    expectEnvelope(await call('POST', '/v1/grants', { grant: agent, body: '{"type":', headers: json }), 'GRANT_DENIED');
  });
});

describe('found by the fuzzer', () => {
  it('an Expect other than 100-continue is ignored rather than a bare 417', async () => {
    const answer = await raw('GET /v1/jobs HTTP/1.1\r\nhost: x\r\nexpect: something-else\r\nconnection: close\r\n\r\n');
    expect(answer.status).toBe(401);
    expect(answer.json.error.code).toBe('GRANT_MISSING');
  });

  it('HEAD on an event stream answers its headers at once instead of hanging', async () => {
    const head = await call('HEAD', '/v1/events');
    expect(head.status).toBe(200);
    expect(head.headers.get('content-type')).toContain('text/event-stream');
    expect((await call('GET', '/healthz')).status).toBe(200);
  });

  it('an empty access_token before the real one is not "no grant"; two grants are refused', async () => {
    const admin = encodeURIComponent(running().admin);
    // A blob read is one of the routes that take a grant in the URL; an unknown digest is 404 once the grant passed.
    const blob = `/v1/blobs/sha256:${'0'.repeat(64)}`;
    expect((await call('GET', `${blob}?access_token=&access_token=${admin}`, { grant: null })).status).toBe(404);
    expectEnvelope(await call('GET', `${blob}?access_token=x&access_token=${admin}`, { grant: null }), 'GRANT_INVALID', 'one access_token');
  });
});
