import net from 'node:net';
import fc from 'fast-check';
import type { Outcome, RouteSpec } from './http.js';
import { answerProblems, DOCUMENTED_5XX } from './oracle.js';

/**
 * Requests written byte by byte on a TCP socket: what no HTTP client would send
 * (unknown methods, broken request lines and headers, wrong Content-Length,
 * headers over Node's limit). Node's parser refuses most of them before Fastify
 * sees a request; the answer must still be the envelope.
 */
export interface RawInput {
  method: string;
  target: string;
  version: string;
  headers: [string, string][];
  body: string;
  length: 'exact' | 'none' | 'garbage' | 'negative' | 'double' | 'chunked-garbage';
  keepAlive: boolean;
  pipelined: boolean;
}

const ASCII = fc.string({ unit: 'binary-ascii', maxLength: 30 });
const HEADER_NAMES = ['x-a', 'content-type', 'transfer-encoding', 'expect', 'upgrade', 'connection', 'authorization', 'host', 'cookie', 'accept', 'if-none-match', 'range', 'sec-websocket-key'];

export function rawInputs(routes: readonly RouteSpec[]): fc.Arbitrary<RawInput> {
  const paths = [...new Set(routes.map((route) => route.template.replace(/\{\w+\}/g, 'x'))), '/', '/web/gallery.js'];
  return fc.record({
    method: fc.oneof(
      { weight: 6, arbitrary: fc.constantFrom('GET', 'POST', 'PUT', 'DELETE', 'HEAD', 'OPTIONS', 'PATCH') },
      { weight: 1, arbitrary: fc.stringMatching(/^[A-Z]{1,10}$/) },
      { weight: 1, arbitrary: fc.string({ unit: 'binary-ascii', maxLength: 8 }) },
    ),
    target: fc.oneof(
      { weight: 6, arbitrary: fc.constantFrom(...paths) },
      { weight: 1, arbitrary: fc.constantFrom('*', 'http://example.com/healthz', '//', '/%', '/v1/jobs/%ff', '/?%', '') },
      { weight: 1, arbitrary: ASCII },
      { weight: 1, arbitrary: fc.integer({ min: 900, max: 20_000 }).map((n) => `/v1/jobs/${'a'.repeat(n)}`) },
    ),
    version: fc.constantFrom('HTTP/1.1', 'HTTP/1.1', 'HTTP/1.1', 'HTTP/1.1', 'HTTP/1.0', 'HTTP/0.9', 'HTTP/2.0', 'HTTP/1.2', 'http/1.1', 'HTTP/1.1 x', ''),
    headers: fc.array(fc.oneof(
      { weight: 4, arbitrary: fc.tuple(fc.constantFrom(...HEADER_NAMES), fc.oneof(fc.constantFrom('websocket', 'chunked', '100-continue', 'application/json', 'bytes=0-1', 'Bearer x'), fc.string({ maxLength: 20 }))) },
      { weight: 1, arbitrary: fc.tuple(ASCII, ASCII) },
      { weight: 1, arbitrary: fc.integer({ min: 1000, max: 20_000 }).map((n): [string, string] => ['x-big', 'b'.repeat(n)]) },
    ), { maxLength: 4 }),
    body: fc.string({ unit: 'binary-ascii', maxLength: 60 }),
    length: fc.constantFrom<RawInput['length']>('exact', 'exact', 'exact', 'exact', 'none', 'garbage', 'negative', 'double', 'chunked-garbage'),
    keepAlive: fc.boolean(),
    pipelined: fc.boolean(),
  });
}

function bytesOf(input: RawInput): Buffer {
  const body = Buffer.from(input.body, 'latin1');
  const lines = [`${input.method} ${input.target} ${input.version}`, 'host: fuzz', ...input.headers.map(([name, value]) => `${name}: ${value}`)];
  switch (input.length) {
    case 'exact': lines.push(`content-length: ${body.length}`); break;
    case 'none': break;
    case 'garbage': lines.push('content-length: abc'); break;
    case 'negative': lines.push('content-length: -1'); break;
    case 'double': lines.push(`content-length: ${body.length}`, `content-length: ${body.length + 1}`); break;
    case 'chunked-garbage': lines.push('transfer-encoding: chunked'); break;
  }
  if (!input.keepAlive) lines.push('connection: close');
  const one = Buffer.concat([Buffer.from(`${lines.join('\r\n')}\r\n\r\n`, 'latin1'), body]);
  return input.pipelined ? Buffer.concat([one, one]) : one;
}

interface RawAnswer { status: number; contentType: string | undefined; body: string; head: boolean }

/** The answers in what the server wrote, in order; a problem string for bytes that are not HTTP. */
function parseAnswers(bytes: Buffer, head: boolean): { answers: RawAnswer[]; problem?: string } {
  const answers: RawAnswer[] = [];
  let rest: Buffer = bytes;
  while (rest.length > 0) {
    const end = rest.indexOf('\r\n\r\n');
    if (end < 0) return { answers, problem: `a partial answer: ${JSON.stringify(rest.subarray(0, 120).toString('latin1'))}` };
    const [statusLine, ...headerLines] = rest.subarray(0, end).toString('latin1').split('\r\n');
    const status = /^HTTP\/1\.[01] (\d{3})/.exec(statusLine!)?.[1];
    if (!status) return { answers, problem: `not an HTTP answer: ${JSON.stringify(statusLine)}` };
    const headers = new Map(headerLines.map((line) => {
      const colon = line.indexOf(':');
      return [line.slice(0, colon).trim().toLowerCase(), line.slice(colon + 1).trim()] as const;
    }));
    rest = rest.subarray(end + 4);
    const code = Number(status);
    let body: Buffer = Buffer.alloc(0);
    // An answer to HEAD has no body, except a refusal by Node's parser, written before it knew the method.
    const bodyless = head && (rest.length === 0 || rest.subarray(0, 5).toString('latin1') === 'HTTP/');
    if (!bodyless && code >= 200 && code !== 204 && code !== 304) {
      if (headers.get('transfer-encoding')?.includes('chunked')) {
        const chunks: Buffer[] = [];
        for (;;) {
          const lineEnd = rest.indexOf('\r\n');
          if (lineEnd < 0) return { answers, problem: 'a chunked answer cut short' };
          const size = parseInt(rest.subarray(0, lineEnd).toString('latin1'), 16);
          rest = rest.subarray(lineEnd + 2);
          if (!Number.isFinite(size)) return { answers, problem: 'a bad chunk size' };
          if (size === 0) {
            rest = rest.subarray(rest.indexOf('\r\n') + 2);
            break;
          }
          chunks.push(rest.subarray(0, size));
          rest = rest.subarray(size + 2);
        }
        body = Buffer.concat(chunks);
      } else if (headers.has('content-length')) {
        const length = Number(headers.get('content-length'));
        body = rest.subarray(0, length);
        rest = rest.subarray(length);
      } else {
        body = rest;
        rest = Buffer.alloc(0);
      }
    }
    if (code >= 200) answers.push({ status: code, contentType: headers.get('content-type'), body: body.toString(), head: bodyless });
  }
  return { answers };
}

/** Write the bytes, half-close, and read what comes back until the server closes. */
export async function runRaw(url: string, input: RawInput): Promise<Outcome> {
  const bytes = bytesOf(input);
  const sent = JSON.stringify(bytes.subarray(0, 400).toString('latin1')) + (bytes.length > 400 ? `…(${bytes.length} bytes)` : '');
  const { hostname, port } = new URL(url);
  const received: Buffer[] = [];
  const ended = await new Promise<string | null>((resolve) => {
    const socket = net.connect(Number(port), hostname, () => socket.end(bytes));
    socket.on('data', (chunk: Buffer) => received.push(chunk));
    socket.on('error', () => { /* a reset after the answer is the server's right; the bytes decide */ });
    socket.on('close', () => resolve(null));
    socket.setTimeout(10_000, () => {
      socket.destroy();
      resolve('the server neither answered nor closed within 10 s');
    });
  });
  const { answers, problem } = parseAnswers(Buffer.concat(received), input.method === 'HEAD');
  const problems = [...(ended ? [ended] : []), ...(problem ? [problem] : [])];
  for (const answer of answers) problems.push(...answerProblems(answer, bytes.toString('latin1'), DOCUMENTED_5XX[input.target.split('?')[0]!]));
  return { label: 'raw HTTP', seen: answers.length ? answers.map((answer) => answer.status).join('+') : 'closed', problems, sent };
}
