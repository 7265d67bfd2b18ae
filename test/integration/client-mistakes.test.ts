import net from 'node:net';
import { describe, expect, it } from 'vitest';
import { LIMITS } from '../../src/protocol/index.js';
import { meshForFile } from '../helpers/mesh.js';

/**
 * Issue 29, finding 6: a client's mistake became a 500. Multipart edits with no boundary, a boundary that never comes,
 * or a body cut mid-part were 500s (busboy's errors were not mapped), and `data` nested 100,000 arrays deep was a 500
 * on OIP infer and on /v1/jobs (a stack overflow flattening the tensor). Here each against a real `gpumesh up`: a 400
 * in the surface's shape — OpenAI's `{error: {message, type, param, code}}`, OIP's `{error: "…"}`, the envelope
 * elsewhere — and for the nesting, on every route that takes a JSON body.
 */
const running = meshForFile({ args: ['--no-agent'] });
const DEEP = 100_000;
const deepArray = (levels = DEEP): string => `${'['.repeat(levels)}${']'.repeat(levels)}`;
const deepObject = (levels = DEEP): string => `${'{"a":'.repeat(levels)}1${'}'.repeat(levels)}`;

interface RawAnswer { status: number; headers: string; body: string }

/** Bytes written as they are on a fresh socket; the first answer read back (or null if the server closed first). */
async function raw(bytes: string | Buffer): Promise<RawAnswer | null> {
  const { port } = new URL(running().url);
  return new Promise((resolve, reject) => {
    const socket = net.connect(Number(port), '127.0.0.1', () => socket.write(bytes));
    let received = '';
    const timer = setTimeout(() => {
      socket.destroy();
      reject(new Error(`no answer within 10 s; got ${JSON.stringify(received.slice(0, 200))}`));
    }, 10_000);
    const answer = (): RawAnswer | null => {
      const end = received.indexOf('\r\n\r\n');
      if (end < 0) return null;
      const headers = received.slice(0, end);
      const length = Number(/content-length: (\d+)/i.exec(headers)?.[1] ?? NaN);
      const body = received.slice(end + 4);
      if (!Number.isFinite(length) || body.length < length) return null;
      return { status: Number(/^HTTP\/1\.1 (\d{3})/.exec(headers)![1]), headers, body: body.slice(0, length) };
    };
    socket.on('data', (part: Buffer) => {
      received += part.toString('latin1');
      const got = answer();
      if (got) {
        clearTimeout(timer);
        socket.destroy();
        resolve(got);
      }
    });
    socket.on('error', () => { /* a reset after the answer */ });
    socket.on('close', () => {
      clearTimeout(timer);
      resolve(answer());
    });
  });
}

/** A POST of `body` (as it is) with the admin grant. */
function post(path: string, contentType: string, body: string, extra = ''): string {
  return `POST ${path} HTTP/1.1\r\nHost: mesh\r\nAuthorization: Bearer ${running().admin}\r\nContent-Type: ${contentType}\r\n${extra}`
    + `Content-Length: ${Buffer.byteLength(body, 'latin1')}\r\n\r\n${body}`;
}

const openAiError = (answer: RawAnswer | null) => (JSON.parse(answer!.body) as { error: { message: string; type: string; param: string | null; code: string } }).error;

describe('multipart edits the parser cannot read are 400s in OpenAI\'s shape (issue 29, finding 6)', () => {
  const edit = (contentType: string, body: string) => raw(post('/openai/v1/images/edits', contentType, body));

  it('no boundary', async () => {
    const answer = await edit('multipart/form-data', '--x\r\nContent-Disposition: form-data; name="prompt"\r\n\r\nhi\r\n--x--\r\n');
    expect(answer?.status).toBe(400);
    expect(openAiError(answer)).toMatchObject({ code: 'BAD_REQUEST', type: 'invalid_request_error', message: expect.stringContaining('Boundary not found') });
  });

  it('a boundary that never comes', async () => {
    const answer = await edit('multipart/form-data; boundary=never', 'just some bytes, no part at all');
    expect(answer?.status).toBe(400);
    expect(openAiError(answer)).toMatchObject({ code: 'BAD_REQUEST', type: 'invalid_request_error', message: expect.stringContaining('Unexpected end of multipart data') });
  });

  it('a body cut in the middle of a field, and in the middle of the picture', async () => {
    const field = await edit('multipart/form-data; boundary=cut', '--cut\r\nContent-Disposition: form-data; name="prompt"\r\n\r\nthe same in sn');
    expect(field?.status).toBe(400);
    expect(openAiError(field)).toMatchObject({ code: 'BAD_REQUEST', type: 'invalid_request_error' });
    const picture = await edit('multipart/form-data; boundary=cut',
      '--cut\r\nContent-Disposition: form-data; name="prompt"\r\n\r\nsnow\r\n--cut\r\nContent-Disposition: form-data; name="image"; filename="a.png"\r\nContent-Type: image/png\r\n\r\n\x89PNG\r\n\x1a\n\0\0\0\rIHDR');
    expect(picture?.status).toBe(400);
    expect(openAiError(picture)).toMatchObject({ code: 'BAD_REQUEST', type: 'invalid_request_error', message: expect.stringContaining('terminated early') });
  });

  it('a part whose header is not a header', async () => {
    const answer = await edit('multipart/form-data; boundary=b', `--b\r\n${'x'.repeat(100)}\r\n\r\nvalue\r\n--b--\r\n`);
    expect(answer!.status).toBeGreaterThanOrEqual(400);
    expect(answer!.status).toBeLessThan(500);
    expect(openAiError(answer).type).toBe('invalid_request_error');
  });

  it('a field sent as application/json that nests 30,000 deep (the fuzzer\'s find) is a 400 naming the field', async () => {
    const answer = await edit('multipart/form-data; boundary=j', `--j\r\nContent-Disposition: form-data; name="user"\r\nContent-Type: application/json\r\n\r\n${deepArray(30_000)}\r\n--j--\r\n`);
    expect(answer?.status).toBe(400);
    expect(openAiError(answer)).toMatchObject({ code: 'VALIDATION_FAILED', param: 'user', message: expect.stringContaining('user: a text field, not a JSON list') });
  });

  it('the connection stays usable after a refused edit whose body was read to its end', async () => {
    const { port } = new URL(running().url);
    const socket = net.connect(Number(port), '127.0.0.1');
    let received = '';
    socket.on('data', (part: Buffer) => (received += part.toString('latin1')));
    await new Promise((resolve) => socket.once('connect', resolve));
    socket.write(post('/openai/v1/images/edits', 'multipart/form-data; boundary=never', 'no part at all'));
    socket.write('GET /healthz HTTP/1.1\r\nHost: mesh\r\n\r\n');
    const deadline = Date.now() + 10_000;
    while (!/\{"ok":true\}/.test(received) && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 20));
    socket.destroy();
    expect(received).toMatch(/^HTTP\/1\.1 400 /);
    expect(received).toMatch(/HTTP\/1\.1 200 [\s\S]*\{"ok":true\}/);
  });
});

describe(`JSON nested past LIMITS.jsonDepth (${LIMITS.jsonDepth}) is a 400 before anything recurses (issue 29, finding 6)`, () => {
  it('OIP infer: data 100,000 arrays deep, as JSON and in a binary request\'s inference header, is 400 in OIP\'s shape', async () => {
    const body = `{"inputs":[{"name":"INPUT0","shape":[1,16],"datatype":"INT32","data":${deepArray()}}]}`;
    const json = await raw(post('/v2/models/simple/infer', 'application/json', body));
    expect(json?.status).toBe(400);
    expect(JSON.parse(json!.body)).toEqual({ error: `The inference header nests arrays and objects deeper than the limit of ${LIMITS.jsonDepth} levels` });
    const binary = await raw(post('/v2/models/simple/infer', 'application/octet-stream', `${body}\0\0\0\0`, `Inference-Header-Content-Length: ${body.length}\r\n`));
    expect(binary?.status).toBe(400);
    expect(JSON.parse(binary!.body).error).toMatch(/nests arrays and objects deeper/);
  });

  it('/v1/jobs: a tensor\'s data and a free-form input 100,000 deep are 400 NESTING_TOO_DEEP; nesting as deep as the shape is taken', async () => {
    for (const body of [
      `{"type":"tensor","model":"simple","input":{"inputs":{"INPUT0":{"shape":[1,16],"data":${deepArray()}}}}}`,
      `{"type":"tensor","input":{"x":${deepArray()}}}`,
      `{"type":"image","input":{"prompt":"p","extra":${deepObject()}}}`,
    ]) {
      const answer = await raw(post('/v1/jobs', 'application/json', body));
      expect(answer?.status).toBe(400);
      expect(JSON.parse(answer!.body)).toEqual({ error: { code: 'NESTING_TOO_DEEP', message: `The JSON body nests arrays and objects deeper than the limit of ${LIMITS.jsonDepth} levels` } });
    }
    // Nested as OIP allows (one level per dimension): accepted as before.
    const row = Array.from({ length: 16 }, (_, index) => index);
    const legal = await raw(post('/v1/jobs', 'application/json', JSON.stringify({
      type: 'tensor', model: 'simple', input: { inputs: { INPUT0: { shape: [1, 16], data: [row] }, INPUT1: { shape: [1, 16], data: [row] } } },
    })));
    expect(legal?.status).toBe(202);
    // Nested deeper than the shape but within the limit: refused by name, never a 500.
    const over = await raw(post('/v1/jobs', 'application/json', JSON.stringify({
      type: 'tensor', model: 'simple', input: { inputs: { INPUT0: { shape: [1, 16], data: JSON.parse(deepArray(40)) }, INPUT1: { shape: [1, 16], data: [row] } } },
    })));
    expect(over?.status).toBe(400);
    expect(JSON.parse(over!.body).error.code).toBe('INVALID_INPUT');
  });

  it('OpenAI generations: 400 in OpenAI\'s shape', async () => {
    const answer = await raw(post('/openai/v1/images/generations', 'application/json', `{"prompt":"p","user":${deepArray()}}`));
    expect(answer?.status).toBe(400);
    expect(openAiError(answer)).toMatchObject({ code: 'NESTING_TOO_DEEP', type: 'invalid_request_error' });
  });

  it('every route that takes a JSON body (as the OpenAPI document lists them) answers 400 NESTING_TOO_DEEP, with the admin grant', async () => {
    const document = await (await fetch(`${running().url}/openapi.json`)).json() as { paths: Record<string, Record<string, { requestBody?: { content?: Record<string, unknown> } }>> };
    const { models } = await (await fetch(`${running().url}/v1/models`, { headers: { authorization: `Bearer ${running().admin}` } })).json() as { models: { name: string; version: string }[] };
    // Path parameters that name something that exists where the route looks it up before its body (OIP's model).
    const known: Record<string, string> = { model: 'simple', version: models.find((model) => model.name === 'simple')!.version };
    const routes = Object.entries(document.paths).flatMap(([path, operations]) => Object.entries(operations)
      .filter(([, operation]) => operation.requestBody?.content?.['application/json'])
      .map(([method]) => ({ method: method.toUpperCase(), path: path.replace(/\{(\w+)\}/g, (_whole, name: string) => known[name] ?? 'x') })));
    expect(routes.length).toBeGreaterThanOrEqual(10);
    for (const { method, path } of routes) {
      for (const body of [deepArray(), deepObject()]) {
        const answer = await raw(post(path, 'application/json', body).replace(/^POST /, `${method} `));
        expect([method, path, answer?.status]).toEqual([method, path, 400]);
        const parsed = JSON.parse(answer!.body) as { error: string | { code?: string; extra_info?: { code?: string } }; detail?: string };
        // A1111's door names the code in `error` and says it in `detail`; the OIP's says it in `error`.
        if (parsed.detail !== undefined) expect([method, path, parsed.error, parsed.detail]).toEqual([method, path, 'NESTING_TOO_DEEP', expect.stringMatching(/nests arrays and objects deeper/)]);
        else if (typeof parsed.error === 'string') expect(parsed.error).toMatch(/nests arrays and objects deeper/);
        // ComfyUI's shape (its door) keeps gpumesh's code in extra_info.
        else expect([method, path, parsed.error.code ?? parsed.error.extra_info?.code]).toEqual([method, path, 'NESTING_TOO_DEEP']);
      }
    }
  });
});
