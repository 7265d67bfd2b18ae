import { createHash } from 'node:crypto';
import http from 'node:http';
import fc from 'fast-check';
import type { KnownIds } from './known.js';
import { answerProblems, DOCUMENTED_5XX } from './oracle.js';
import { anyJson, arbitraryFor, type JsonSchema, type Vocabulary } from './schema-arbitrary.js';

export interface ParamSpec {
  name: string;
  schema: JsonSchema;
}

export interface RouteSpec {
  /** "METHOD /path/{param}", as the table shows it. */
  label: string;
  method: string;
  /** OpenAPI path, `{name}` for each parameter. */
  template: string;
  path: ParamSpec[];
  query: ParamSpec[];
  /** The JSON body's schema, or null when the route declares none. */
  body: JsonSchema | null;
}

/**
 * Routes that answer only once their jobs have ended (OIP infer, OpenAI images, A1111's txt2img and img2img): a request whose body fits waits for
 * an agent, and the fuzzed mesh has none, so it would be no answer after 15 s. They are fuzzed as routes without a
 * JSON body (any JSON, bytes), which they refuse before submitting a job.
 */
const ANSWERS_WHEN_JOBS_END = /^POST \/(?:v2\/models\/.+\/infer|openai\/v1\/images\/|sdapi\/v1\/(?:txt2img|img2img)$)/;

/** Every route and method the server's OpenAPI document lists: a new route is fuzzed without editing this file. */
export function routesFromOpenApi(document: { paths: Record<string, Record<string, OpenApiOperation>> }): RouteSpec[] {
  const routes: RouteSpec[] = [];
  for (const [template, operations] of Object.entries(document.paths)) {
    for (const [method, operation] of Object.entries(operations)) {
      const parameters = operation.parameters ?? [];
      const pick = (where: string): ParamSpec[] => parameters.filter((parameter) => parameter.in === where).map(({ name, schema }) => ({ name, schema: schema ?? {} }));
      const label = `${method.toUpperCase()} ${template}`;
      routes.push({
        label, method: method.toUpperCase(), template,
        path: pick('path'), query: pick('query'),
        body: ANSWERS_WHEN_JOBS_END.test(label) ? null : operation.requestBody?.content?.['application/json']?.schema ?? null,
      });
    }
  }
  return routes;
}

interface OpenApiOperation {
  parameters?: { in: string; name: string; schema?: JsonSchema }[];
  requestBody?: { content?: Record<string, { schema?: JsonSchema }> };
}

/** Who a request claims to be. Only `admin` may do everything; `none`, `garbage` and `malformed` must meet a 401 first. */
export type GrantChoice = 'admin' | 'none' | 'garbage' | 'malformed' | 'client' | 'agent' | 'minted';

type Body =
  | { kind: 'json'; value: unknown }
  | { kind: 'text'; text: string }
  | { kind: 'bytes'; bytes: number[] }
  | { kind: 'huge'; bytes: number };

export interface HttpInput {
  label: string;
  method: string;
  template: string;
  params: { name: string; text: string; encode: boolean }[];
  query: { pairs: [string, string][] } | { raw: string };
  grant: GrantChoice;
  grantVia: 'header' | 'query';
  /** Which minted grant, when `grant` is `minted`. */
  pick: number;
  headers: Record<string, string>;
  body: { contentType: string | null; content: Body } | null;
  /** The route's own method (the grant-first property applies) and whether its path needs a grant. */
  onRoute: boolean;
  needsGrant: boolean;
}

/** What the runner needs from the session to send an input. */
export interface HttpTarget {
  url: string;
  known: KnownIds;
  agent: http.Agent;
  grant(choice: GrantChoice, pick: number): string | null;
  /** A grant the server minted in answer to a fuzzed request, to use later. */
  learnGrant(token: string): void;
}


const OTHER_METHODS = ['GET', 'HEAD', 'POST', 'PUT', 'DELETE', 'PATCH', 'OPTIONS', 'TRACE', 'PROPFIND', 'SEARCH', 'MKCOL', 'PURGE'];

const CONTENT_TYPES = [
  'application/json; charset=utf-8', 'Application/JSON', 'application/json;charset=latin1', 'application/json; x="unterminated',
  'text/plain', 'text/plain; charset=utf-8', 'application/x-www-form-urlencoded', 'multipart/form-data; boundary=x',
  'application/octet-stream', 'image/png', 'bogus', '][', '', '*/*', 'application/vnd.api+json',
];

const GARBAGE_BODIES = ['{', '{"type":', '[', ']', 'null', '[]', '"x"', '0', '{"a":1}{"b":2}', '{"__proto__":{"x":1}}', '{"constructor":{"prototype":{"x":1}}}', '\u0000', '\ufeff{}', `${'['.repeat(5000)}${']'.repeat(5000)}`, '{"a":"\\ud800"}', '1e999',
  // Nested far past LIMITS.jsonDepth: 400 NESTING_TOO_DEEP before anything recurses (issue 29: a 500 from a stack overflow).
  `${'['.repeat(100_000)}${']'.repeat(100_000)}`, `${'{"a":'.repeat(100_000)}1${'}'.repeat(100_000)}`,
  `{"type":"tensor","input":{"inputs":{"INPUT0":{"shape":[1,16],"data":${'['.repeat(100_000)}${']'.repeat(100_000)}}}}}`];

/** Printable ASCII that http.request puts on the request line as is, `/`, `?` and `#` left out so the route stays the same. */
const RAW_PATH_CHARS = [...'abcXYZ019-._~!$&\'()*+,;=:@%'];
const HEADER_TEXT = fc.string({ unit: fc.constantFrom(...' !"#$%&\'()*+,-./0123456789:;<=>?@ABCXYZ[\\]^_`abcxyz{|}~'), maxLength: 40 });

const grantArbitrary = fc.constantFrom<GrantChoice>('admin', 'admin', 'admin', 'admin', 'admin', 'admin', 'none', 'none', 'none', 'garbage', 'malformed', 'client', 'agent', 'minted');

function paramArbitrary(parameter: ParamSpec, vocabulary: Vocabulary): fc.Arbitrary<{ text: string; encode: boolean }> {
  const encoded = (arbitrary: fc.Arbitrary<string>) => arbitrary.map((text) => ({ text, encode: true }));
  const fitting = arbitraryFor(parameter.schema, { ...vocabulary, mutationWeight: 0 }).map(String);
  const named = vocabulary.fieldWords?.[parameter.name] ?? [];
  return fc.oneof(
    { weight: 5, arbitrary: encoded(fitting) },
    { weight: 2, arbitrary: encoded(fc.constantFrom(...vocabulary.words)) },
    ...(named.length ? [{ weight: 4, arbitrary: encoded(fc.constantFrom(...named)) }] : []),
    { weight: 2, arbitrary: encoded(fc.string({ unit: 'grapheme', maxLength: 120 })) },
    { weight: 2, arbitrary: fc.string({ unit: fc.constantFrom(...RAW_PATH_CHARS), maxLength: 30 }).map((text) => ({ text, encode: false })) },
    // Around the schema's limit (100) and the router's (1000).
    { weight: 1, arbitrary: fc.oneof(fc.integer({ min: 95, max: 105 }), fc.integer({ min: 990, max: 1010 }), fc.integer({ min: 1, max: 3000 })).map((n) => ({ text: 'a'.repeat(n), encode: false })) },
    { weight: 1, arbitrary: fc.constantFrom('%ff', '%', '%zz', '%00', '%2F', '%2e%2e', '%c3%28', '%e2%82').map((text) => ({ text, encode: false })) },
  );
}

function queryArbitrary(parameters: readonly ParamSpec[], vocabulary: Vocabulary): fc.Arbitrary<HttpInput['query']> {
  const one = (parameter: ParamSpec): fc.Arbitrary<[string, string][]> => fc.oneof(
    { weight: 3, arbitrary: fc.constant<[string, string][]>([]) },
    { weight: 3, arbitrary: arbitraryFor({ properties: { [parameter.name]: parameter.schema }, required: [parameter.name] }, { ...vocabulary, mutationWeight: 0 })
      .map((value) => [[parameter.name, String((value as Record<string, unknown>)[parameter.name])] as [string, string]]) },
    { weight: 2, arbitrary: anyJson(1).map((value) => [[parameter.name, typeof value === 'string' ? value : JSON.stringify(value)] as [string, string]]) },
    { weight: 1, arbitrary: fc.tuple(fc.string({ maxLength: 5 }), fc.string({ maxLength: 5 })).map(([a, b]) => [[parameter.name, a], [parameter.name, b]] as [string, string][]) },
  );
  const declared = fc.tuple(...parameters.map(one)).map((lists) => lists.flat());
  const extra = fc.array(fc.tuple(fc.oneof(fc.string({ maxLength: 8 }), fc.constantFrom('__proto__', 'constructor', 'limit[]', 'a.b')), fc.string({ maxLength: 8 })), { maxLength: 2 });
  return fc.oneof(
    { weight: 8, arbitrary: fc.tuple(declared, extra).map(([a, b]) => ({ pairs: [...a, ...b] })) },
    { weight: 1, arbitrary: fc.string({ unit: fc.constantFrom(...RAW_PATH_CHARS, '=', '&', '?', '/'), maxLength: 40 }).map((raw) => ({ raw })) },
  );
}

function bodyArbitrary(route: RouteSpec, vocabulary: Vocabulary): fc.Arbitrary<HttpInput['body']> {
  const contentType = fc.oneof(
    { weight: 12, arbitrary: fc.constant<string | null>('application/json') },
    { weight: 2, arbitrary: fc.constantFrom<string | null>(...CONTENT_TYPES) },
    { weight: 1, arbitrary: fc.constant<string | null>(null) },
  );
  const content = (body: fc.Arbitrary<Body>) => fc.tuple(contentType, body).map(([type, value]) => ({ contentType: type, content: value }));
  const json: fc.Arbitrary<Body> = route.body
    // Half fit the schema throughout (to reach the handler), half carry a wrong value somewhere.
    ? fc.oneof(arbitraryFor(route.body, { ...vocabulary, mutationWeight: 0 }), arbitraryFor(route.body, vocabulary)).map((value) => ({ kind: 'json', value }))
    : anyJson(2).map((value) => ({ kind: 'json', value }));
  const garbage: fc.Arbitrary<Body> = fc.oneof(fc.constantFrom(...GARBAGE_BODIES), fc.string({ maxLength: 60 })).map((text) => ({ kind: 'text', text }));
  const bytes: fc.Arbitrary<Body> = fc.array(fc.integer({ min: 0, max: 255 }), { maxLength: 300 }).map((list) => ({ kind: 'bytes', bytes: list }));
  const none = fc.constant(null);
  if (route.body) {
    return fc.oneof(
      { weight: 20, arbitrary: content(json) },
      { weight: 4, arbitrary: content(garbage) },
      { weight: 1, arbitrary: content(bytes) },
      { weight: 2, arbitrary: none },
      { weight: 1, arbitrary: content(fc.constant<Body>({ kind: 'text', text: '' })) },
      // Over the 1 MiB body limit.
      { weight: 1, arbitrary: fc.constant({ contentType: 'application/json', content: { kind: 'huge', bytes: 1024 * 1024 + 64 } as Body }) },
    );
  }
  // A route without a JSON body: usually nothing, sometimes bytes anyway (an upload is exactly that).
  const uploadTypes = fc.constantFrom<string | null>('image/png', 'application/octet-stream', 'text/plain', 'application/json', 'not a type', 'a/b/c', null);
  return fc.oneof(
    { weight: route.method === 'PUT' || route.method === 'POST' ? 2 : 8, arbitrary: none },
    { weight: 2, arbitrary: fc.tuple(uploadTypes, fc.oneof(bytes, garbage, json)).map(([type, value]) => ({ contentType: type, content: value })) },
  );
}

const extraHeaders: fc.Arbitrary<Record<string, string>> = fc.record({
  'if-none-match': fc.oneof(fc.constant('"@@digest:0"'), fc.constant('*'), HEADER_TEXT),
  'last-event-id': fc.oneof(fc.nat().map(String), HEADER_TEXT),
  range: fc.oneof(fc.constantFrom('bytes=0-1', 'bytes=99999999-', 'bytes=abc', 'bytes=5-1'), HEADER_TEXT),
  'if-match': HEADER_TEXT,
  accept: fc.constantFrom('application/json', 'text/event-stream', '*/*', ''),
  'accept-encoding': fc.constantFrom('gzip', 'br', 'identity', 'x'),
  'content-encoding': fc.constantFrom('gzip', 'deflate', 'x'),
  expect: fc.constant('100-continue'),
}, { requiredKeys: [] }).chain((headers) => fc.oneof({ weight: 6, arbitrary: fc.constant({}) }, { weight: 1, arbitrary: fc.constant(headers) }));

/** Inputs for one route: its own method mostly, its parameters, its body, a grant (or none). */
export function routeInputs(route: RouteSpec, vocabulary: Vocabulary): fc.Arbitrary<HttpInput> {
  const forParams = { ...vocabulary, words: [...vocabulary.words, '@@bodydigest'] };
  return fc.record({
    method: fc.oneof({ weight: 12, arbitrary: fc.constant(route.method) }, { weight: 1, arbitrary: fc.constantFrom(...OTHER_METHODS) }),
    params: fc.tuple(...route.path.map((parameter) => paramArbitrary(parameter, forParams).map((value) => ({ name: parameter.name, ...value })))),
    query: queryArbitrary(route.query, vocabulary),
    grant: grantArbitrary,
    grantVia: fc.constantFrom<'header' | 'query'>('header', 'header', 'header', 'query'),
    pick: fc.nat(20),
    headers: extraHeaders,
    body: bodyArbitrary(route, vocabulary),
  }).map((input) => ({
    ...input,
    label: route.label,
    template: route.template,
    onRoute: input.method === route.method || (input.method === 'HEAD' && route.method === 'GET'),
    needsGrant: route.template.startsWith('/v1/') || route.template.startsWith('/openai/') || route.template.startsWith('/sdapi/'),
  }));
}

/** Paths no route declares (and some that the gallery's static files serve): 404s and the router's own refusals. */
export function anyPathInputs(vocabulary: Vocabulary): fc.Arbitrary<HttpInput> {
  const segment = fc.oneof(
    fc.constantFrom('v1', 'jobs', 'events', 'blobs', 'artifacts', 'agents', 'link', 'outputs', 'web', 'gallery.js', 'index.html', 'healthz', 'openapi.json', '..', '.', '', '.hidden'),
    fc.constantFrom(...vocabulary.words).map(encodeURIComponent),
    fc.string({ unit: fc.constantFrom(...RAW_PATH_CHARS), maxLength: 12 }),
  );
  return fc.record({
    method: fc.constantFrom(...OTHER_METHODS),
    segments: fc.array(segment, { minLength: 0, maxLength: 5 }),
    query: queryArbitrary([], vocabulary),
    grant: grantArbitrary,
    headers: extraHeaders,
  }).map(({ method, segments, query, grant, headers }) => ({
    label: 'any path', method, template: `/${segments.join('/')}`, params: [], query, grant, grantVia: 'header' as const, pick: 0, headers,
    body: null, onRoute: false, needsGrant: false,
  }));
}

function bodyBytes(known: KnownIds, content: Body): Buffer {
  switch (content.kind) {
    case 'json': return Buffer.from(JSON.stringify(known.resolve(content.value)) ?? 'null');
    case 'text': return Buffer.from(known.resolveText(content.text));
    case 'bytes': return Buffer.from(content.bytes);
    case 'huge': return Buffer.from(`{"type":"image","input":{"prompt":"${'x'.repeat(content.bytes)}"}}`);
  }
}

export interface HttpAnswer {
  status: number;
  contentType: string | undefined;
  body: string;
}

/** One request over a real socket; event streams are read to their headers and then dropped. */
function send(target: HttpTarget, options: http.RequestOptions, body: Buffer | null): Promise<HttpAnswer> {
  return new Promise((resolve, reject) => {
    const request = http.request(new URL(target.url), { ...options, agent: target.agent, timeout: 15_000 }, (response) => {
      const contentType = response.headers['content-type'];
      if (contentType?.startsWith('text/event-stream')) {
        response.destroy();
        return resolve({ status: response.statusCode!, contentType, body: '' });
      }
      const chunks: Buffer[] = [];
      response.on('data', (chunk: Buffer) => chunks.push(chunk));
      response.on('end', () => resolve({ status: response.statusCode!, contentType, body: Buffer.concat(chunks).toString() }));
      response.on('error', reject);
    });
    request.on('timeout', () => request.destroy(new Error('no answer within 15 s')));
    request.on('error', reject);
    request.end(body ?? undefined);
  });
}

/** Learn what exists from a successful answer: jobs, digests, minted grants. */
function learn(target: HttpTarget, answer: HttpAnswer): void {
  if (answer.status >= 300 || !answer.contentType?.startsWith('application/json')) return;
  let json: Record<string, unknown>;
  try {
    json = JSON.parse(answer.body) as Record<string, unknown>;
  } catch {
    return;
  }
  // An answer of `null` (A1111's options and skip) teaches nothing.
  if (json === null || typeof json !== 'object') return;
  if (typeof json.id === 'string' && json.id.startsWith('j_')) target.known.add('job', json.id);
  if (typeof json.token === 'string') target.learnGrant(json.token);
  for (const job of Array.isArray(json.jobs) ? json.jobs : []) target.known.add('job', (job as { id?: unknown }).id);
  for (const artifact of Array.isArray(json.artifacts) ? json.artifacts : []) target.known.add('digest', (artifact as { digest?: unknown }).digest);
}

export interface Outcome {
  label: string;
  /** What came back, for the table: a status, or `no answer`. */
  seen: string;
  problems: string[];
  /** The input as it was sent, for a failure report. */
  sent: string;
}

export async function runHttp(target: HttpTarget, input: HttpInput): Promise<Outcome> {
  const body = input.body ? bodyBytes(target.known, input.body.content) : null;
  const digest = `sha256:${createHash('sha256').update(body ?? Buffer.alloc(0)).digest('hex')}`;
  let path = input.template;
  let routerRefuses = false;
  for (const { name, text, encode } of input.params) {
    const resolved = target.known.resolveText(text).replaceAll('@@bodydigest', digest);
    const written = encode ? encodeURIComponent(resolved) : resolved;
    routerRefuses ||= written.length > 1000 || !decodes(written);
    path = path.replace(`{${name}}`, () => written);
  }
  const token = target.grant(input.grant, input.pick);
  let query = 'raw' in input.query ? input.query.raw : new URLSearchParams(input.query.pairs.map(([key, value]) => [key, target.known.resolveText(value)])).toString();
  if (token && input.grantVia === 'query') query = `${query ? `${query}&` : ''}access_token=${encodeURIComponent(token)}`;
  const headers: Record<string, string> = {};
  for (const [name, value] of Object.entries(input.headers)) headers[name] = target.known.resolveText(value);
  if (token && input.grantVia === 'header') headers.authorization = input.grant === 'malformed' ? `Basic ${token}` : `Bearer ${token}`;
  if (input.body?.contentType != null) headers['content-type'] = input.body.contentType;
  if (body) headers['content-length'] = String(body.length);
  const url = `${path}${query ? `?${query}` : ''}`;
  const sent = `${input.method} ${url.length > 300 ? `${url.slice(0, 300)}…(${url.length})` : url} grant=${input.grant}/${input.grantVia} ${JSON.stringify(input.headers)} ${input.body ? `${input.body.contentType}: ${body!.length > 300 ? `${body!.subarray(0, 300).toString()}…(${body!.length} bytes)` : body!.toString()}` : '(no body)'}`;

  let answer: HttpAnswer;
  try {
    answer = await send(target, { method: input.method, path: url, headers }, body);
  } catch (error) {
    return { label: input.label, seen: 'no answer', problems: [`no answer: ${(error as Error).message}`], sent };
  }
  learn(target, answer);
  const problems = answerProblems({ ...answer, head: input.method === 'HEAD' }, `${url} ${decoded(url)} ${body?.toString() ?? ''}`, DOCUMENTED_5XX[input.template]);
  if (!routerRefuses) problems.push(...grantFirstProblems(input, answer, new URLSearchParams(query).getAll('access_token').some(Boolean)));
  return { label: input.label, seen: String(answer.status), problems, sent };
}

function decodes(text: string): boolean {
  return decoded(text) !== null;
}

function decoded(text: string): string | null {
  try {
    return decodeURIComponent(text);
  } catch {
    return null;
  }
}

/** The routes a browser reaches without headers, which take `?access_token=` (blob reads and thumbnails, event streams). */
function takesQueryGrant(input: HttpInput): boolean {
  const readable = input.method === 'GET' || input.method === 'HEAD';
  return readable && ['/v1/blobs/{digest}', '/v1/blobs/{digest}/thumbnail', '/v1/events', '/v1/jobs/{id}/events', '/v1/pipelines/{id}/events'].includes(input.template);
}

/**
 * The grant is checked before anything of the request is validated: on a /v1 route, a request
 * without a grant is 401 GRANT_MISSING and one with an unreadable grant 401 GRANT_INVALID,
 * whatever its parameters, query and body. Only the router's own refusals come first (a path
 * parameter that is not valid percent-encoding or over 1,000 characters; the caller leaves
 * those out), and an empty parameter, which names no route at all.
 */
function grantFirstProblems(input: HttpInput, answer: HttpAnswer, tokenInQuery: boolean): string[] {
  if (!input.onRoute || !input.needsGrant || input.params.some(({ text }) => text === '')) return [];
  // A grant in the URL, where the route takes none, is refused before the grant is even read (400 GRANT_IN_QUERY).
  if (tokenInQuery && !takesQueryGrant(input)) {
    return answer.status === 400 && (input.method === 'HEAD' || answer.body.includes('GRANT_IN_QUERY'))
      ? [] : [`expected 400 GRANT_IN_QUERY for a grant in the URL of a route that takes none, got ${answer.status}`];
  }
  // A generated access_token query parameter is a grant too (an unreadable one).
  const missing = input.grant === 'none' && !tokenInQuery;
  const expected = missing ? 'GRANT_MISSING' : ['none', 'garbage', 'malformed'].includes(input.grant) ? 'GRANT_INVALID' : null;
  if (!expected) return [];
  let code: string | undefined;
  try {
    // A1111's door names the code in `error` itself.
    const { error } = JSON.parse(answer.body) as { error: { code: string } | string };
    code = typeof error === 'string' ? error : error.code;
  } catch { /* HEAD, or not the envelope (reported already) */ }
  if (answer.status !== 401 || (input.method !== 'HEAD' && code !== expected)) return [`expected 401 ${expected} before anything else, got ${answer.status} ${code ?? ''}`];
  return [];
}
