import { createHash } from 'node:crypto';
import fc from 'fast-check';
import WebSocket from 'ws';
import { z } from 'zod';
import { AgentMessage, LINK_CLOSE, LINK_LIMITS, LINK_PATH, LINK_PROTOCOL_VERSION, type OrchestratorMessage } from '../../src/protocol/index.js';
import type { KnownIds } from './known.js';
import type { Outcome } from './http.js';
import { arbitraryFor, type JsonSchema, type Vocabulary } from './schema-arbitrary.js';

/** One WebSocket frame an agent could send. */
export type Frame =
  | { kind: 'json'; value: unknown }
  | { kind: 'text'; text: string }
  | { kind: 'binary'; bytes: number[] };

export interface LinkInput {
  /** Frames before the hello (the first one decides: only a hello is welcome). */
  before: Frame[];
  hello: Frame | null;
  after: Frame[];
}

export interface LinkTarget {
  url: string;
  known: KnownIds;
  /** An agent grant for `host`, and the host it names. */
  agentGrant: string;
  agentHost: string;
  /** The largest frame the orchestrator reads (agents.link.maxFrameBytes): a larger one closes the link (1009). */
  maxFrameBytes: number;
  learnGrant(token: string): void;
}

const WAIT_MS = 10_000;

const GARBAGE_TEXT = ['', '{', 'null', '[]', '"hello"', '0', '{}', '{"type":"hello"}', '{"type":"nope"}', '{"type":"heartbeat","inFlight":1e999,"resident":[],"devices":[]}', '{"type":null}', '{"__proto__":{"type":"hello"}}', '\u0000', '\ud800'];

/** RFC 6455 1009: a frame larger than the receiver takes. */
const TOO_BIG = 1009;

/** The link's documented answers to a frame, from the protocol file: what the oracle expects. */
function verdict(text: string | null, joined: boolean, host: string, maxFrameBytes: number): { close: number } | { hello: boolean } {
  if (text !== null && Buffer.byteLength(text) > maxFrameBytes) return { close: TOO_BIG };
  if (text === null) return { close: LINK_CLOSE.binary };
  let message: AgentMessage;
  try {
    const parsed = AgentMessage.safeParse(JSON.parse(text));
    if (!parsed.success) return { close: LINK_CLOSE.malformed };
    message = parsed.data;
  } catch {
    return { close: LINK_CLOSE.malformed };
  }
  if (joined) return { hello: false };
  if (message.type !== 'hello') return { close: LINK_CLOSE.rejected };
  if (message.protocol !== LINK_PROTOCOL_VERSION || message.host !== host) return { close: LINK_CLOSE.rejected };
  return { hello: true };
}

/**
 * Link inputs: messages generated from the zod union `AgentMessage` itself (through its JSON
 * Schema, so a new message type is fuzzed without editing this file), mutated now and then,
 * plus frames that are not messages at all; before the hello, in place of it, and after it.
 */
export function linkInputs(vocabulary: Vocabulary, host: string): fc.Arbitrary<LinkInput> {
  const schema = z.toJSONSchema(AgentMessage, { io: 'input', unrepresentable: 'any' }) as JsonSchema;
  const helloSchema = schema.oneOf!.find((variant) => (variant.properties?.type as { const?: unknown } | undefined)?.const === 'hello')!;
  const message = arbitraryFor(schema, { ...vocabulary, mutationWeight: 1 });
  const frame: fc.Arbitrary<Frame> = fc.oneof(
    { weight: 50, arbitrary: message.map((value) => ({ kind: 'json' as const, value })) },
    { weight: 10, arbitrary: fc.oneof(fc.constantFrom(...GARBAGE_TEXT), fc.string({ maxLength: 40 })).map((text) => ({ kind: 'text' as const, text })) },
    { weight: 5, arbitrary: fc.array(fc.integer({ min: 0, max: 255 }), { maxLength: 40 }).map((bytes) => ({ kind: 'binary' as const, bytes })) },
    { weight: 8, arbitrary: manyIds(LINK_LIMITS.jobIdsPerMessage + 100) },
    // A frame of the attack that stalled the orchestrator: 150,000 ids, over 4 MB (cut at the frame limit).
    { weight: 1, arbitrary: manyIds(150_000, 150_000) },
    { weight: 8, arbitrary: resultWithOutput() },
  );
  // A hello that is usually accepted: the grant's host and this protocol, the rest generated.
  const hello: fc.Arbitrary<Frame> = fc.tuple(
    arbitraryFor(helloSchema, { ...vocabulary, mutationWeight: 0 }),
    fc.constantFrom('keep', 'keep', 'keep', 'keep', 'keep', 'keep', 'host', 'protocol'),
  ).map(([value, spoil]) => ({
    kind: 'json' as const,
    value: { ...(value as object), host: spoil === 'host' ? `${host}-other` : host, protocol: spoil === 'protocol' ? LINK_PROTOCOL_VERSION + 1 : LINK_PROTOCOL_VERSION },
  }));
  return fc.record({
    before: fc.oneof({ weight: 4, arbitrary: fc.constant<Frame[]>([]) }, { weight: 1, arbitrary: fc.array(frame, { minLength: 1, maxLength: 2 }) }),
    hello: fc.oneof({ weight: 9, arbitrary: hello }, { weight: 1, arbitrary: frame }),
    after: fc.array(frame, { maxLength: 6 }),
  });
}

/**
 * A report naming many jobs: up to the most a message may name and past it, the ids mostly not the agent's (the
 * jobs it was sent, by marker, now and then): each such message must cost one refusal, not one per id.
 */
function manyIds(max: number, min = 0): fc.Arbitrary<Frame> {
  return fc.record({
    type: fc.constantFrom('loading', 'started', 'progress'),
    count: fc.integer({ min, max }),
    own: fc.nat({ max: 3 }),
  }).map(({ type, count, own }) => ({
    kind: 'json' as const,
    value: {
      type, batchId: '@@batch:0', step: 1, total: 2,
      jobIds: Array.from({ length: count }, (_, i) => (i < own ? `@@job:${i}` : `j_not_yours_${String(i).padStart(8, '0')}`)),
    },
  }));
}

/** Bytes an agent may send as an output: what they are, whatever type they are then declared as. */
const OUTPUT_BYTES: Record<string, Buffer> = {
  png: Buffer.from('89504e470d0a1a0a0000000d49484452000000010000000108060000001f15c4890000000d4944415478da63f8ffff3f0005fe02fea7356b810000000049454e44ae426082', 'hex'),
  html: Buffer.from('<!doctype html><script>fetch("/v1/grants",{headers:{authorization:"Bearer "+location.search}})</script>'),
  svg: Buffer.from('<svg xmlns="http://www.w3.org/2000/svg" onload="alert(1)"/>'),
  json: Buffer.from('{"y":[1,2,3]}'),
  text: Buffer.from('a report'),
  binary: Buffer.from([0, 1, 2, 3, 0xff]),
};
const DECLARED = ['image/png', 'image/jpeg', 'text/html', 'image/svg+xml', 'application/json', 'text/plain', 'video/mp4', 'application/octet-stream', 'application/javascript'];

/**
 * A result naming one of the jobs it was sent, with an output inline: bytes of one kind declared as any media type
 * (HTML as a PNG, a PNG as HTML, an SVG with a script). Whatever is accepted must be served so it cannot script the
 * orchestrator's origin: the session's health check reads every published output's headers.
 */
function resultWithOutput(): fc.Arbitrary<Frame> {
  return fc.record({
    job: fc.nat({ max: 5 }),
    bytes: fc.constantFrom(...Object.keys(OUTPUT_BYTES)),
    declared: fc.constantFrom(...DECLARED),
  }).map(({ job, bytes, declared }) => {
    const content = OUTPUT_BYTES[bytes]!;
    return {
      kind: 'json' as const,
      value: {
        type: 'done', jobId: `@@job:${job}`, batchId: '@@batch:0', timings: { loadMs: 0, computeMs: 1, totalMs: 1 },
        artifacts: [{ digest: `sha256:${createHash('sha256').update(content).digest('hex')}`, mediaType: declared, bytes: content.length, inline: content.toString('base64') }],
      },
    };
  });
}

/** The text of a frame with its markers swapped for ids seen so far; null for a binary frame. */
function textOf(known: KnownIds, frame: Frame): string | null {
  if (frame.kind === 'binary') return null;
  return frame.kind === 'json' ? JSON.stringify(known.resolve(frame.value)) ?? 'null' : known.resolveText(frame.text);
}

/**
 * Connect a real WebSocket with the agent grant, send the frames, and check the link
 * did what the protocol says: closed with the documented code at the first frame that
 * calls for it, or stayed open (a ping answered after the last frame proves it).
 */
export async function runLink(target: LinkTarget, input: LinkInput): Promise<Outcome> {
  const label = input.before.length > 0 || input.hello?.kind !== 'json' ? 'link: frames before hello' : 'link: after hello';
  const frames = [...input.before, ...(input.hello ? [input.hello] : []), ...input.after];
  const sentTexts: string[] = [];
  const describe = (): string => sentTexts.map((text) => (text.length > 200 ? `${text.slice(0, 200)}…` : text)).join(' | ');
  const url = new URL(LINK_PATH, target.url);
  url.protocol = 'ws:';
  const socket = new WebSocket(url, { headers: { authorization: `Bearer ${target.agentGrant}` } });
  const inbox: OrchestratorMessage[] = [];
  let closed: { code: number; reason: string } | null = null;
  const closing = new Promise<void>((resolve) => socket.once('close', (code, reason) => {
    closed = { code, reason: reason.toString() };
    resolve();
  }));
  socket.on('error', () => { /* the close event reports it */ });
  socket.on('message', (data) => {
    let message: OrchestratorMessage;
    try {
      message = JSON.parse(data.toString()) as OrchestratorMessage;
    } catch {
      return;
    }
    inbox.push(message);
    if (message.type === 'run') {
      target.known.add('batch', message.batchId);
      target.learnGrant(message.uploadCredential);
      for (const job of message.jobs) target.known.add('job', job.id);
    }
  });
  const opened = await Promise.race([
    new Promise<boolean>((resolve) => socket.once('open', () => resolve(true))),
    closing.then(() => false),
    delay(WAIT_MS).then(() => false),
  ]);
  if (!opened) {
    socket.terminate();
    return { label, seen: 'no upgrade', problems: [`the link did not open (${JSON.stringify(closed)})`], sent: '' };
  }

  let joined = false;
  let expectClose: number | null = null;
  for (const frame of frames) {
    const text = textOf(target.known, frame);
    sentTexts.push(text ?? `<binary ${frame.kind === 'binary' ? frame.bytes.length : 0} bytes>`);
    socket.send(text ?? Buffer.from(frame.kind === 'binary' ? frame.bytes : []), { binary: text === null });
    const next = verdict(text, joined, target.agentHost, target.maxFrameBytes);
    if ('close' in next) {
      expectClose = next.close;
      break;
    }
    if (next.hello) {
      joined = true;
      // Wait for the welcome, so the ids of any jobs it brings can be used by the next frames.
      const welcomed = await waitUntil(() => inbox.some((message) => message.type === 'welcome') || closed !== null);
      if (!welcomed || closed) return finish(label, socket, closing, [`the hello was not welcomed (${JSON.stringify(closed)})`], describe());
    }
  }

  const problems: string[] = [];
  if (expectClose !== null) {
    await Promise.race([closing, delay(WAIT_MS)]);
    const got = closed as { code: number; reason: string } | null;
    if (!got) problems.push(`expected the link to close with ${expectClose}; it stayed open`);
    else if (got.code !== expectClose) problems.push(`expected close ${expectClose}, got ${got.code} ${got.reason}`);
    return finish(label, socket, closing, problems, describe(), got ? String(got.code) : 'open');
  }
  // Everything sent should have been accepted: a ping answered after it shows the link is still up.
  const ponged = new Promise<boolean>((resolve) => socket.once('pong', () => resolve(true)));
  socket.ping();
  const alive = await Promise.race([ponged, closing.then(() => false), delay(WAIT_MS).then(() => false)]);
  if (!alive) problems.push(`the link closed or went silent after frames it should accept (${JSON.stringify(closed)})`);
  return finish(label, socket, closing, problems, describe(), alive ? 'open' : String((closed as { code: number } | null)?.code ?? 'silent'));
}

async function finish(label: string, socket: WebSocket, closing: Promise<void>, problems: string[], sent: string, seen = 'no welcome'): Promise<Outcome> {
  if (socket.readyState === WebSocket.OPEN || socket.readyState === WebSocket.CONNECTING) socket.close(1000);
  const done = await Promise.race([closing.then(() => true), delay(WAIT_MS).then(() => false)]);
  if (!done) {
    socket.terminate();
    problems.push('the link did not finish closing');
  }
  return { label, seen, problems, sent };
}

function delay(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms).unref());
}

async function waitUntil(check: () => boolean): Promise<boolean> {
  const deadline = Date.now() + WAIT_MS;
  while (!check()) {
    if (Date.now() > deadline) return false;
    await delay(5);
  }
  return true;
}
