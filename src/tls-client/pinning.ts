import http from 'node:http';
import https from 'node:https';
import { httpFetch, httpRequest, type HttpAnswer, type HttpRequest } from '../net/http-client.js';
import { inspectGrant } from '../protocol/grant-token.js';
import { certificateFingerprint, TLS_CA_CAVEAT, TLS_CA_PATH } from './fingerprint.js';
import { MeshError } from '../protocol/index.js';

/** A fingerprint the orchestrator's CA must have, and who said so (for error messages). */
export interface Pin {
  /** `sha256:<64 hex>`. */
  fingerprint: string;
  /** `the grant`, `--tls-ca-fingerprint`, … */
  source: string;
}

/**
 * The server is not the one the pin names, or cannot be pinned at all.
 * Retrying will not help; nothing carrying a grant was sent.
 */
export class TlsPinError extends Error {
  override readonly name = 'TlsPinError';
}

/** The `tls-ca` caveats of a grant, read without verifying it (clients cannot; they only need to know what to pin). */
export function pinsOfGrant(token: string | null | undefined): Pin[] {
  if (!token) return [];
  let caveats: string[];
  try {
    caveats = inspectGrant(token).caveats;
  } catch {
    return []; // not a grant: the orchestrator will say so, over whatever connection the other pins allow
  }
  const prefix = `${TLS_CA_CAVEAT} `;
  return caveats.filter((line) => line.startsWith(prefix)).map((line) => ({ fingerprint: line.slice(prefix.length).trim(), source: 'the grant' }));
}

const CA_FETCH_TIMEOUT_MS = 10_000;
const CA_MAX_BYTES = 64 * 1024;
/** Redirects a request followed where nothing is pinned (as fetch does: a bucket's presigned URL). */
const MAX_REDIRECTS = 20;

/** What `ServerTrust.fetch` takes: the subset of fetch's options the mesh's clients use. */
export interface TrustedRequestInit {
  method?: string;
  headers?: Record<string, string>;
  body?: string | Uint8Array<ArrayBuffer>;
  signal?: AbortSignal;
}

/**
 * How a client trusts one orchestrator, and its requests to it (over net/http-client.ts, the one HTTP client):
 * - `http:` — plain; refused when a pin is given, so a grant that expects TLS never crosses the network in clear text;
 * - `https:` without a pin — the system's CAs (a mesh behind a proxy with a public certificate);
 * - `https:` with pins — the CA the server serves at `/v1/tls/ca.crt`, accepted only if its SHA-256
 *   fingerprint equals every pin, then used as the *only* trusted root. It is fetched once, before
 *   any request that carries a grant.
 */
export class ServerTrust {
  readonly origin: string;
  readonly pins: readonly Pin[];
  readonly #base: URL;
  #ca: Promise<string> | null = null;
  #agent: http.Agent | null = null;

  constructor(baseUrl: string, pins: readonly Pin[] = []) {
    this.#base = new URL(baseUrl);
    this.origin = this.#base.origin;
    const unique = new Map(pins.map((pin) => [`${pin.fingerprint} ${pin.source}`, pin]));
    this.pins = [...unique.values()];
  }

  get https(): boolean {
    return this.#base.protocol === 'https:';
  }

  /** True when connections verify against a pinned private CA. */
  get pinned(): boolean {
    return this.https && this.pins.length > 0;
  }

  /**
   * The `ca` option for node:https and ws: the pinned CA (fetched and checked on first use), or
   * undefined when nothing is pinned. Throws TlsPinError when the server's CA is not the pinned one.
   */
  async ca(): Promise<string | undefined> {
    if (!this.https) {
      if (this.pins.length > 0) {
        throw new TlsPinError(`${describePins(this.pins)} a TLS CA, but ${this.origin} is plain http: use its https:// URL, so the grant does not cross the network in clear text`);
      }
      return undefined;
    }
    if (this.pins.length === 0) return undefined;
    this.#ca ??= fetchPinnedCa(this.#base, this.pins).catch((error: unknown) => {
      this.#ca = null; // a network error may pass; try again on the next call
      throw error;
    });
    return this.#ca;
  }

  /**
   * A request to this server, answered as a standard Response whose body streams (model pulls, SSE). Its
   * connections are kept alive (a fresh handshake per request would dominate small ones) and, with a pinned CA,
   * verified against it alone — a URL on another origin the mesh handed out (its publicUrl) too. A redirect is
   * followed only where nothing is pinned: a pinned grant never follows the mesh off its CA.
   */
  async fetch(url: string | URL, init: TrustedRequestInit = {}): Promise<Response> {
    const agent = await this.#connectionsFor(new URL(url));
    return httpFetch(url, { ...init, agent, redirects: this.pinned ? 0 : MAX_REDIRECTS });
  }

  /** A request to this server read whole (an upload's answer), over the same connections as `fetch`. */
  async request(url: string | URL, init: Omit<HttpRequest, 'agent' | 'unverified'> = {}): Promise<HttpAnswer> {
    return httpRequest(url, { ...init, agent: await this.#connectionsFor(new URL(url)) });
  }

  /** Close idle kept-alive connections. */
  close(): void {
    this.#agent?.destroy();
  }

  /**
   * The keep-alive pool for a URL of this server's scheme (with the pinned CA once it is checked); a URL of the
   * other scheme (a publicUrl the mesh handed out) gets Node's default connections — unless a CA is pinned, which
   * an http URL would leave behind.
   */
  async #connectionsFor(url: URL): Promise<http.Agent | undefined> {
    const ca = await this.ca();
    if (url.protocol !== this.#base.protocol) {
      if (this.pinned) throw new TlsPinError(`${describePins(this.pins)} a TLS CA, but ${url.origin} is plain http: the grant does not cross the network in clear text`);
      return undefined;
    }
    this.#agent ??= this.https ? new https.Agent({ keepAlive: true, ca }) : new http.Agent({ keepAlive: true });
    return this.#agent;
  }

  /** A sentence for a TLS failure (certificate names, untrusted chain), or null if the error is not about TLS. */
  explain(error: unknown): string | null {
    return explainTlsError(error, this.#base, this.pinned);
  }
}

function describePins(pins: readonly Pin[]): string {
  const sources = [...new Set(pins.map((pin) => pin.source))];
  return `${sources.join(' and ')} ${sources.length > 1 ? 'pin' : 'pins'}`;
}

/**
 * Fetch the CA certificate without verifying the server (there is nothing to verify it with yet)
 * and keep it only if it hashes to every pin. The request carries no grant, so an impostor learns
 * nothing from it; and an impostor that answers with the real CA certificate gains nothing either,
 * since every later handshake must present a certificate signed with that CA's private key.
 */
async function fetchPinnedCa(base: URL, pins: readonly Pin[]): Promise<string> {
  const url = new URL(TLS_CA_PATH, base);
  let response: HttpAnswer;
  try {
    response = await getUnverified(url);
  } catch (error) {
    throw new MeshError('TLS_CA_UNAVAILABLE', { url: url.href, detail: (error as Error).message }, { cause: error });
  }
  if (response.status >= 500) throw new MeshError('TLS_CA_UNAVAILABLE', { url: url.href, detail: `HTTP ${response.status}` });
  if (response.status !== 200) {
    throw new TlsPinError(`${url} answered HTTP ${response.status}: ${base.origin} serves no TLS CA, so it is not a gpumesh orchestrator started with --tls (${describePins(pins)} ${pins[0]!.fingerprint})`);
  }
  let actual: string;
  try {
    actual = certificateFingerprint(response.text);
  } catch {
    throw new TlsPinError(`${url} did not answer with a certificate; refusing to connect (${describePins(pins)} ${pins[0]!.fingerprint})`);
  }
  const wrong = pins.filter((pin) => pin.fingerprint !== actual);
  if (wrong.length > 0) {
    const expected = wrong.map((pin) => `${pin.fingerprint} (from ${pin.source})`).join(' and ');
    throw new TlsPinError(
      `TLS CA mismatch at ${base.origin}: the server's CA is ${actual}, but the pinned CA is ${expected}. ` +
      'Refusing to connect; no grant was sent. Either this is not your orchestrator, or its CA was replaced and you need a new grant.',
    );
  }
  return response.text;
}

/** The CA certificate, trusting nothing yet: a connection of its own, a short limit, a small answer. */
function getUnverified(url: URL): Promise<HttpAnswer> {
  return httpRequest(url, { agent: false, unverified: true, timeoutMs: CA_FETCH_TIMEOUT_MS, maxBytes: CA_MAX_BYTES });
}

const UNTRUSTED_CHAIN = new Set([
  'SELF_SIGNED_CERT_IN_CHAIN', 'DEPTH_ZERO_SELF_SIGNED_CERT', 'UNABLE_TO_VERIFY_LEAF_SIGNATURE',
  'UNABLE_TO_GET_ISSUER_CERT_LOCALLY', 'UNABLE_TO_GET_ISSUER_CERT', 'CERT_SIGNATURE_FAILURE',
]);

function tlsCode(error: unknown): { code: string; message: string } | null {
  for (let current = error as { code?: unknown; message?: unknown; cause?: unknown } | undefined, depth = 0; current && depth < 4; current = current.cause as typeof current, depth++) {
    if (typeof current.code === 'string' && (UNTRUSTED_CHAIN.has(current.code) || current.code.startsWith('ERR_TLS_') || current.code.startsWith('CERT_'))) {
      return { code: current.code, message: String(current.message) };
    }
  }
  return null;
}

function explainTlsError(error: unknown, base: URL, pinned: boolean): string | null {
  const tls = tlsCode(error);
  if (!tls) return null;
  const host = base.hostname.replace(/^\[|\]$/g, '');
  if (tls.code === 'ERR_TLS_CERT_ALTNAME_INVALID') {
    return `the orchestrator's TLS certificate does not name "${host}" (${tls.message}); restart it with --tls-name ${host} (or add it to server.tls.names)`;
  }
  if (tls.code === 'CERT_HAS_EXPIRED' || tls.code === 'CERT_NOT_YET_VALID') {
    return `the orchestrator's TLS certificate is not valid now (${tls.code}); restarting the orchestrator re-issues it, and check this machine's clock`;
  }
  if (UNTRUSTED_CHAIN.has(tls.code)) {
    return pinned
      ? `the orchestrator's TLS certificate is not signed by the pinned CA (${tls.code})`
      : `the TLS certificate of ${base.origin} is not trusted by this machine (${tls.code}), and nothing names a CA to pin: ` +
        'use a grant minted by that mesh (its grants carry a tls-ca caveat) or pass --tls-ca-fingerprint sha256:… (printed by `gpumesh serve --tls`)';
  }
  return `TLS failed (${tls.code}): ${tls.message}`;
}
