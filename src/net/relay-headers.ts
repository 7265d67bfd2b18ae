import { LINK_LIMITS, type RelayHeaders } from '../protocol/index.js';

/**
 * Which headers a pass-through relay carries, each way (docs/api.md, "ComfyUI pass-through"). Both ends apply them:
 * the orchestrator to what it takes from a client and what it hands back, the agent to what it sends ComfyUI and what
 * it reads from it, so neither trusts the other to have done it.
 */

/**
 * A client's headers that reach ComfyUI: what describes the body and what the client accepts, conditional and range
 * requests, and ComfyUI's own user header. Never `Authorization` (the grant is the mesh's, not ComfyUI's), cookies,
 * `Host` and `Origin` (the agent's own request has its own; ComfyUI refuses a request whose Origin is not its host),
 * or anything about the connection.
 */
const REQUEST_HEADERS = new Set([
  'accept', 'accept-encoding', 'accept-language', 'cache-control', 'content-disposition', 'content-encoding', 'content-length', 'content-type',
  'if-match', 'if-modified-since', 'if-none-match', 'if-range', 'if-unmodified-since', 'pragma', 'range', 'user-agent', 'comfy-user',
]);

/** The headers a WebSocket handshake may carry on to ComfyUI (the subprotocols it offers, and who it is). */
const SOCKET_HEADERS = new Set(['sec-websocket-protocol', 'user-agent', 'accept-language', 'comfy-user']);

/**
 * Never handed back to a client: the connection's own (RFC 9110 §7.6.1, hop by hop), cookies (the orchestrator's
 * origin is not ComfyUI's), and what the orchestrator sets itself.
 */
const HOP_BY_HOP = new Set([
  'connection', 'keep-alive', 'proxy-connection', 'proxy-authenticate', 'proxy-authorization', 'te', 'trailer', 'trailers', 'transfer-encoding', 'upgrade',
  'set-cookie', 'set-cookie2', 'content-security-policy', 'x-content-type-options', 'strict-transport-security',
]);

type IncomingHeaders = Readonly<Record<string, string | string[] | undefined>>;

/** Node's headers as `[name, value]` pairs, in the protocol's bounds. */
function pairs(headers: IncomingHeaders, keep: (name: string) => boolean): RelayHeaders {
  const out: [string, string][] = [];
  for (const [name, value] of Object.entries(headers)) {
    const lower = name.toLowerCase();
    if (value === undefined || !keep(lower)) continue;
    for (const one of Array.isArray(value) ? value : [value]) {
      if (out.length >= LINK_LIMITS.relayHeaders) return out;
      if (lower.length <= 256 && one.length <= LINK_LIMITS.relayHeaderChars) out.push([lower, one]);
    }
  }
  return out;
}

/** The names a `Connection` header lists: hop by hop as well. */
function connectionNames(headers: IncomingHeaders): Set<string> {
  const listed = headers.connection;
  const text = Array.isArray(listed) ? listed.join(',') : listed ?? '';
  return new Set(text.split(',').map((name) => name.trim().toLowerCase()).filter(Boolean));
}

/** What of a client's HTTP request goes on to ComfyUI. */
export function requestHeaders(headers: IncomingHeaders): RelayHeaders {
  return pairs(headers, (name) => REQUEST_HEADERS.has(name));
}

/** What of a client's WebSocket handshake goes on to ComfyUI. */
export function socketHeaders(headers: IncomingHeaders): RelayHeaders {
  return pairs(headers, (name) => SOCKET_HEADERS.has(name));
}

/** What of ComfyUI's answer goes back: all but the hop-by-hop headers, those its `Connection` names, and cookies. */
export function answerHeaders(headers: IncomingHeaders): RelayHeaders {
  const named = connectionNames(headers);
  return pairs(headers, (name) => !HOP_BY_HOP.has(name) && !named.has(name));
}

/** Pairs as Node takes them for an outgoing message (a repeated name as an array). */
export function headerRecord(headers: RelayHeaders): Record<string, string | string[]> {
  const record: Record<string, string | string[]> = {};
  for (const [name, value] of headers) {
    const before = record[name];
    record[name] = before === undefined ? value : [...(Array.isArray(before) ? before : [before]), value];
  }
  return record;
}

/** Keep only the pairs `keep` allows (a receiver applies its side's rule again to what the other end sent). */
export function onlyHeaders(headers: RelayHeaders, rule: 'request' | 'socket' | 'answer'): RelayHeaders {
  const record = headerRecord(headers);
  return rule === 'request' ? requestHeaders(record) : rule === 'socket' ? socketHeaders(record) : answerHeaders(record);
}

/**
 * The headers, in order, for as long as they fit `limit` characters (names, values and a little for the JSON around
 * each): a relay's head must fit one frame of the link, whose size the relay's chunk size stands for.
 */
export function headersWithin(headers: RelayHeaders, limit: number): RelayHeaders {
  const kept: [string, string][] = [];
  let size = 0;
  for (const [name, value] of headers) {
    size += name.length + value.length + 8;
    if (size > limit) break;
    kept.push([name, value]);
  }
  return kept;
}
