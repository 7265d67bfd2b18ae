import http from 'node:http';
import fc from 'fast-check';
import type { Outcome } from './http.js';
import { answerProblems } from './oracle.js';

/**
 * The surfaces that read their own bodies, fuzzed with inputs shaped like what they take — so the generators reach past
 * the first check, where a generic body never gets: multipart OpenAI edits, OIP infer in the binary tensor extension,
 * resumable uploads (a whole upload's life), and `models add`. Every answer is held to the oracle: no 5xx, the
 * surface's error shape, a registered code. None of them may start a job that waits (the fuzzed mesh runs none): an
 * edit never carries a picture that decodes, and an infer request always carries at least one mistake.
 */

/** What a surface target needs from the session. */
export interface SurfaceTarget {
  url: string;
  agent: http.Agent;
  /** The admin grant. */
  grant(choice: 'admin', pick: number): string | null;
}

interface Answer { status: number; contentType: string | undefined; body: string }

function send(target: SurfaceTarget, method: string, path: string, headers: Record<string, string>, body: Buffer | null): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const request = http.request(new URL(path, target.url), {
      method, agent: target.agent, timeout: 15_000,
      headers: { authorization: `Bearer ${target.grant('admin', 0)}`, ...headers, ...(body ? { 'content-length': String(body.length) } : {}) },
    }, (response) => {
      const chunks: Buffer[] = [];
      response.on('data', (chunk: Buffer) => chunks.push(chunk));
      response.on('end', () => resolve({ status: response.statusCode!, contentType: response.headers['content-type'], body: Buffer.concat(chunks).toString() }));
      response.on('error', reject);
    });
    request.on('timeout', () => request.destroy(new Error('no answer within 15 s')));
    request.on('error', reject);
    request.end(body ?? undefined);
  });
}

/** One request of a surface, its answer checked; a problem for no answer at all. */
async function checked(target: SurfaceTarget, method: string, path: string, headers: Record<string, string>, body: Buffer | null): Promise<{ answer: Answer | null; problems: string[]; sent: string }> {
  const sent = `${method} ${path} ${JSON.stringify(headers)} ${body ? `${body.length} bytes: ${JSON.stringify(body.subarray(0, 240).toString('latin1'))}` : '(no body)'}`;
  try {
    const answer = await send(target, method, path, headers, body);
    return { answer, problems: answerProblems({ ...answer, head: method === 'HEAD' }, `${method} ${path} ${body?.toString('latin1') ?? ''}`), sent };
  } catch (error) {
    return { answer: null, problems: [`no answer: ${(error as Error).message}`], sent };
  }
}

// --- Multipart OpenAI edits -------------------------------------------------------------------------------------

/** Bytes that may look like a picture but never decode as one. */
const PNG_SIGNATURE = Buffer.from('89504e470d0a1a0a', 'hex');
const PICTURE_LIKE = fc.oneof(
  fc.uint8Array({ maxLength: 200 }).map((bytes) => Buffer.from(bytes)),
  fc.uint8Array({ maxLength: 200 }).map((bytes) => Buffer.concat([PNG_SIGNATURE, Buffer.from('\0\0\0\rIHDR\0\0\x0f\xa0\0\0\x0f\xa0\x08\x02\0\0\0', 'latin1'), Buffer.from(bytes)])),
  fc.constantFrom(Buffer.from('GIF89a\x01\0\x01\0\0\0\0;', 'latin1'), Buffer.from([0xff, 0xd8, 0xff, 0xe0, 0, 0x10]), Buffer.from('RIFF\x10\0\0\0WEBPVP8 ', 'latin1'), PNG_SIGNATURE, Buffer.alloc(0)),
);

const FIELD_NAMES = ['prompt', 'n', 'size', 'model', 'response_format', 'output_format', 'strength', 'seed', 'steps', 'stream', 'user', 'bogus', '__proto__', 'constructor', 'image', 'a'.repeat(300)];
const FILE_NAMES = ['image', 'image[]', 'mask', 'other', 'prompt', '__proto__'];

type Part =
  | { kind: 'field'; name: string; value: string; json: boolean }
  | { kind: 'file'; name: string; filename: string | null; contentType: string | null; bytes: Buffer }
  | { kind: 'garbage'; text: string };

const PART: fc.Arbitrary<Part> = fc.oneof(
  { weight: 4, arbitrary: fc.record({
    kind: fc.constant('field' as const), name: fc.constantFrom(...FIELD_NAMES),
    value: fc.oneof(fc.string({ maxLength: 40 }), fc.constantFrom('1', '10', '256x256', 'auto', 'url', 'true', '0.5', ''), fc.integer({ min: 1, max: 70_000 }).map((n) => 'p'.repeat(n))),
    json: fc.boolean(),
  }) },
  // A JSON field whose value nests deeply: the multipart parser parses it (secure-json-parse, without recursion).
  { weight: 1, arbitrary: fc.record({
    kind: fc.constant('field' as const), name: fc.constantFrom('prompt', 'user', 'n'),
    value: fc.integer({ min: 1, max: 30_000 }).map((levels) => `${'['.repeat(levels)}${']'.repeat(levels)}`), json: fc.constant(true),
  }) },
  { weight: 3, arbitrary: fc.record({
    kind: fc.constant('file' as const), name: fc.constantFrom(...FILE_NAMES),
    filename: fc.option(fc.constantFrom('a.png', 'a.jpg', 'a.webp', 'a.txt', 'x', '../../etc/passwd', ''), { nil: null }),
    contentType: fc.option(fc.constantFrom('image/png', 'image/jpeg', 'application/octet-stream', 'text/html', 'bogus'), { nil: null }),
    bytes: PICTURE_LIKE,
  }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('garbage' as const), text: fc.string({ unit: 'binary-ascii', maxLength: 80 }) }) },
);

export interface EditInput {
  /** What the Content-Type header says of the boundary. */
  boundary: 'right' | 'none' | 'other' | 'empty' | 'quoted';
  /** The parts; the prompt first in most. */
  parts: Part[];
  /** Where the body is cut (a share of its length), if it is. */
  cut: number | null;
  closing: boolean;
}

export const editInputs: fc.Arbitrary<EditInput> = fc.record({
  boundary: fc.constantFrom<EditInput['boundary']>('right', 'right', 'right', 'right', 'right', 'none', 'other', 'empty', 'quoted'),
  parts: fc.array(PART, { maxLength: 6 }),
  cut: fc.option(fc.double({ min: 0, max: 1, noNaN: true }), { nil: null, freq: 3 }),
  closing: fc.boolean(),
});

function editBody(input: EditInput, boundary: string): Buffer {
  const pieces: Buffer[] = [];
  for (const part of input.parts) {
    pieces.push(Buffer.from(`--${boundary}\r\n`));
    if (part.kind === 'garbage') {
      pieces.push(Buffer.from(`${part.text}\r\n\r\n`, 'latin1'));
    } else if (part.kind === 'field') {
      pieces.push(Buffer.from(`Content-Disposition: form-data; name="${part.name}"\r\n${part.json ? 'Content-Type: application/json\r\n' : ''}\r\n${part.value}\r\n`));
    } else {
      const filename = part.filename === null ? '' : `; filename="${part.filename}"`;
      pieces.push(Buffer.from(`Content-Disposition: form-data; name="${part.name}"${filename}\r\n${part.contentType ? `Content-Type: ${part.contentType}\r\n` : ''}\r\n`), part.bytes, Buffer.from('\r\n'));
    }
  }
  if (input.closing) pieces.push(Buffer.from(`--${boundary}--\r\n`));
  const whole = Buffer.concat(pieces);
  return input.cut === null ? whole : whole.subarray(0, Math.floor(whole.length * input.cut));
}

export async function runEdit(target: SurfaceTarget, input: EditInput): Promise<Outcome> {
  const boundary = 'fuzz-boundary-7';
  const contentType = {
    right: `multipart/form-data; boundary=${boundary}`, none: 'multipart/form-data', other: 'multipart/form-data; boundary=another',
    empty: 'multipart/form-data; boundary=', quoted: `multipart/form-data; boundary="${boundary}"`,
  }[input.boundary];
  const { answer, problems, sent } = await checked(target, 'POST', '/openai/v1/images/edits', { 'content-type': contentType }, editBody(input, boundary));
  return { label: 'surface: multipart edits', seen: answer ? String(answer.status) : 'no answer', problems, sent };
}

// --- OIP infer, binary tensor extension --------------------------------------------------------------------------

type Mistake = 'header-length-past-body' | 'header-length-garbage' | 'header-not-json' | 'header-deep' | 'size-past-body' | 'extra-bytes'
  | 'ragged-elements' | 'wrong-shape' | 'unknown-input' | 'wrong-datatype' | 'no-data' | 'bytes-element-cut';
const MISTAKES: readonly Mistake[] = ['header-length-past-body', 'header-length-garbage', 'header-not-json', 'header-deep', 'size-past-body', 'extra-bytes',
  'ragged-elements', 'wrong-shape', 'unknown-input', 'wrong-datatype', 'no-data', 'bytes-element-cut'];

export interface InferInput {
  /** At least one: no request here may be valid, or its job would wait for a host. */
  mistakes: Mistake[];
  values: number[];
  outputsBinary: boolean;
  junk: number[];
}

export const inferInputs: fc.Arbitrary<InferInput> = fc.record({
  mistakes: fc.uniqueArray(fc.constantFrom(...MISTAKES), { minLength: 1, maxLength: 3 }),
  values: fc.array(fc.integer({ min: -(2 ** 31), max: 2 ** 31 - 1 }), { minLength: 16, maxLength: 16 }),
  outputsBinary: fc.boolean(),
  junk: fc.array(fc.integer({ min: 0, max: 255 }), { minLength: 1, maxLength: 40 }),
});

/** The built-in `simple` model takes INPUT0 and INPUT1, INT32 [-1, 16]. */
function inferBody(input: InferInput): { body: Buffer; headerLength: string } {
  const has = (mistake: Mistake): boolean => input.mistakes.includes(mistake);
  const tensor = Buffer.alloc(64);
  input.values.forEach((value, index) => tensor.writeInt32LE(value, index * 4));
  const first = has('ragged-elements') ? tensor.subarray(0, 63) : tensor;
  const inputs = [
    { name: has('unknown-input') ? 'INPUT9' : 'INPUT0', shape: has('wrong-shape') ? [1, 15] : [1, 16], datatype: has('wrong-datatype') ? 'FP32' : 'INT32', parameters: { binary_data_size: first.length + (has('size-past-body') ? 1000 : 0) } },
    has('no-data') ? { name: 'INPUT1', shape: [1, 16], datatype: 'INT32' } : { name: 'INPUT1', shape: [1, 16], datatype: 'INT32', parameters: { binary_data_size: 64 } },
  ];
  let header = JSON.stringify({ inputs, parameters: { binary_data_output: input.outputsBinary } });
  if (has('header-not-json')) header = header.slice(0, header.length - 3);
  if (has('header-deep')) header = `{"inputs":[{"name":"INPUT0","shape":[1,16],"datatype":"INT32","data":${'['.repeat(100_000)}${']'.repeat(100_000)}}]}`;
  const second = has('bytes-element-cut') ? Buffer.from([9, 0, 0, 0, 1]) : tensor;
  const parts = [Buffer.from(header), first, ...(has('no-data') ? [] : [second]), ...(has('extra-bytes') ? [Buffer.from(input.junk)] : [])];
  const body = Buffer.concat(parts);
  const headerLength = has('header-length-garbage') ? 'abc' : String(Buffer.byteLength(header) + (has('header-length-past-body') ? body.length : 0));
  return { body, headerLength };
}

export async function runInfer(target: SurfaceTarget, input: InferInput): Promise<Outcome> {
  const { body, headerLength } = inferBody(input);
  const { answer, problems, sent } = await checked(target, 'POST', '/v2/models/simple/infer', {
    'content-type': 'application/octet-stream', 'inference-header-content-length': headerLength,
  }, body);
  // Every input carries a mistake: an answer of 200 means one got through.
  if (answer && answer.status < 400) problems.push(`${answer.status} for a request with ${input.mistakes.join(', ')}`);
  return { label: 'surface: binary OIP', seen: answer ? String(answer.status) : 'no answer', problems, sent: `${input.mistakes.join('+')}: ${sent}` };
}

// --- Resumable uploads: a whole upload's life ----------------------------------------------------------------------

type UploadStep =
  | { op: 'patch'; offset: 'right' | 'zero' | 'past' | 'garbage' | 'none'; bytes: number[]; contentType: string | null }
  | { op: 'get' | 'head' | 'complete' | 'delete' };

export interface UploadInput {
  total: number | null | 'garbage';
  steps: UploadStep[];
}

export const uploadInputs: fc.Arbitrary<UploadInput> = fc.record({
  total: fc.oneof(fc.constant(null), fc.integer({ min: 0, max: 400 }), fc.constant('garbage' as const)),
  steps: fc.array(fc.oneof(
    { weight: 4, arbitrary: fc.record({
      op: fc.constant('patch' as const), offset: fc.constantFrom<'right' | 'zero' | 'past' | 'garbage' | 'none'>('right', 'right', 'right', 'zero', 'past', 'garbage', 'none'),
      bytes: fc.array(fc.integer({ min: 0, max: 255 }), { maxLength: 200 }), contentType: fc.option(fc.constantFrom('application/octet-stream', 'image/png', 'text/plain', 'application/json'), { nil: null }),
    }) },
    { weight: 2, arbitrary: fc.record({ op: fc.constantFrom<'get' | 'head' | 'complete' | 'delete'>('get', 'head', 'complete', 'delete') }) },
  ), { maxLength: 6 }),
});

export async function runUpload(target: SurfaceTarget, input: UploadInput): Promise<Outcome> {
  const problems: string[] = [];
  const seen: string[] = [];
  const sent: string[] = [];
  const step = async (method: string, path: string, headers: Record<string, string>, body: Buffer | null): Promise<Answer | null> => {
    const result = await checked(target, method, path, headers, body);
    problems.push(...result.problems);
    seen.push(result.answer ? String(result.answer.status) : 'none');
    sent.push(result.sent.slice(0, 200));
    return result.answer;
  };
  const created = await step('POST', '/v1/uploads', { 'content-type': 'application/json' }, Buffer.from(JSON.stringify(input.total === null ? {} : { bytes: input.total === 'garbage' ? 'x' : input.total })));
  let id: string | null = null;
  let offset = 0;
  if (created?.status === 201) ({ id, offset } = JSON.parse(created.body) as { id: string; offset: number });
  if (id) {
    for (const next of input.steps) {
      const path = `/v1/uploads/${id}${next.op === 'complete' ? '/complete' : ''}`;
      if (next.op === 'patch') {
        const at = { right: String(offset), zero: '0', past: String(offset + 7), garbage: '-1x', none: null }[next.offset];
        const answer = await step('PATCH', path, { ...(at === null ? {} : { 'upload-offset': at }), ...(next.contentType ? { 'content-type': next.contentType } : {}) }, Buffer.from(next.bytes));
        if (answer?.status === 200) offset = (JSON.parse(answer.body) as { offset: number }).offset;
      } else {
        await step({ get: 'GET', head: 'HEAD', complete: 'POST', delete: 'DELETE' }[next.op], path, {}, null);
      }
    }
    // Never left open: each grant lineage may hold only so many.
    await step('DELETE', `/v1/uploads/${id}`, {}, null);
  }
  return { label: 'surface: resumable uploads', seen: seen.join('>'), problems, sent: sent.join(' | ') };
}

// --- models add ---------------------------------------------------------------------------------------------------

export interface ModelAddInput {
  body: Record<string, unknown>;
}

export const modelAddInputs: fc.Arbitrary<ModelAddInput> = fc.record({
  name: fc.oneof(fc.constantFrom('fuzz-model', 'gen', 'simple', 'mlp', 'a', '-x', 'a@b', ''), fc.stringMatching(/^[a-z][a-z0-9-]{0,20}$/)),
  engine: fc.option(fc.constantFrom('onnx', 'exec', 'comfyui', 'oip', 'sdcpp', 'openai-images', 'bogus', ''), { nil: undefined }),
  types: fc.option(fc.array(fc.constantFrom('tensor', 'image', 'video', 'ocr', 'nope'), { maxLength: 3 }), { nil: undefined }),
  file: fc.option(fc.constantFrom('@@stored', `sha256:${'0'.repeat(64)}`, 'sha256:xyz', ''), { nil: undefined }),
  files: fc.option(fc.dictionary(fc.constantFrom('detector', 'recognizer', 'dictionary', 'model.onnx', '../x', ''), fc.constantFrom('@@stored', `sha256:${'1'.repeat(64)}`)), { nil: undefined }),
  version: fc.option(fc.constantFrom('1', '2', 'v9', '', '../'), { nil: undefined }),
  memoryMB: fc.option(fc.oneof(fc.integer({ min: -5, max: 100_000 }), fc.constant(0.5)), { nil: undefined }),
  settings: fc.option(fc.dictionary(fc.constantFrom('pipeline', 'command', 'url', 'workflow', 'timeoutMs', 'x'), fc.jsonValue({ maxDepth: 2 })), { nil: undefined }),
  inputs: fc.option(fc.array(fc.record({ name: fc.constantFrom('x', 'INPUT0', ''), datatype: fc.constantFrom('FP32', 'INT32', 'NOPE'), shape: fc.array(fc.integer({ min: -2, max: 8 }), { maxLength: 3 }) }), { maxLength: 2 }), { nil: undefined }),
}).map((fields) => ({ body: Object.fromEntries(Object.entries(fields).filter(([, value]) => value !== undefined)) }));

/** A file stored for `models add` to name: bytes that are no model. */
let storedDigest: Promise<string> | null = null;

export async function runModelAdd(target: SurfaceTarget, input: ModelAddInput): Promise<Outcome> {
  storedDigest ??= send(target, 'PUT', '/v1/blobs', { 'content-type': 'application/octet-stream' }, Buffer.from('not a model, stored for the models add fuzzer'))
    .then((answer) => (JSON.parse(answer.body) as { digest: string }).digest);
  const digest = await storedDigest;
  const body = JSON.parse(JSON.stringify(input.body).replaceAll('@@stored', digest)) as Record<string, unknown>;
  const { answer, problems, sent } = await checked(target, 'POST', '/v1/models', { 'content-type': 'application/json' }, Buffer.from(JSON.stringify(body)));
  // One that was added goes again, so the registry stays as it was for the rest of the run.
  if (answer?.status === 201) {
    const { name } = JSON.parse(answer.body) as { name?: string };
    if (name) await send(target, 'DELETE', `/v1/models/${encodeURIComponent(name)}`, {}, null).catch(() => undefined);
  }
  return { label: 'surface: models add', seen: answer ? String(answer.status) : 'no answer', problems, sent };
}
