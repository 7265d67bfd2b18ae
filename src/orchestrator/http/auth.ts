import type { FastifyInstance, FastifyRequest, onRequestHookHandler } from 'fastify';
import { MeshError } from '../../protocol/index.js';
import type { AuditLog } from '../auth/audit.js';
import {
  READ_ACTIONS, UploadCredentials, type Action, type GrantAuthority, type GrantEnd, type GrantLifetimes, type GrantRequest, type RequestOrigin, type VerifiedGrant,
} from '../auth/index.js';
import type { Clock } from '../../protocol/clock.js';
import type { DoorName, OpenDoors } from '../auth/open-doors.js';

declare module 'fastify' {
  interface FastifyRequest {
    grant: VerifiedGrant | null;
    /** The batch whose outputs an upload credential lets this request deliver. */
    uploadBatch: string | null;
    /** The grant as presented, on routes that hand back a narrowing of it. */
    grantToken: string | null;
  }
  interface FastifyContextConfig {
    /**
     * This route may take its grant as an `access_token` query parameter: only
     * read-only GET/HEAD routes that browsers reach without headers (<img>, EventSource).
     */
    queryGrant?: boolean;
  }
}

/** Route config for the few routes that accept `?access_token=`. */
export const QUERY_GRANT_ALLOWED = { queryGrant: true } as const;

const QUERY_METHODS = new Set(['GET', 'HEAD']);

/**
 * The `access_token` query parameter, read from the raw URL (route schemas strip query keys they do not
 * name). An empty one counts as none; two are refused rather than guessed between.
 */
function queryToken(request: FastifyRequest): string | null {
  const url = request.raw.url ?? '';
  const start = url.indexOf('?');
  const tokens = start < 0 ? [] : new URLSearchParams(url.slice(start + 1)).getAll('access_token').filter(Boolean);
  if (tokens.length > 1) throw new MeshError('GRANT_INVALID', { detail: 'send one access_token, not several' });
  return tokens[0] ?? null;
}

/** Whether this request may carry its grant in the URL. */
function queryGrantAllowed(request: FastifyRequest): boolean {
  return request.routeOptions.config?.queryGrant === true && QUERY_METHODS.has(request.method);
}

/**
 * The bearer grant of a request: the Authorization header, or (RFC 6750 §2.3)
 * an `access_token` query parameter on the routes that allow it — the only way
 * an EventSource or an <img> can carry one. Elsewhere a grant in the URL is
 * refused before anything else happens (see `installGrantRules`): URLs end up
 * in logs, proxies and browser history. Sending it both ways is refused too.
 */
function tokenOf(request: FastifyRequest): { token: string; inQuery: boolean } | null {
  const header = request.headers.authorization;
  const query = queryGrantAllowed(request) ? queryToken(request) : null;
  if (header && query !== null) {
    throw new MeshError('BAD_REQUEST', { detail: 'send the grant once: in the Authorization header or as access_token, not both' });
  }
  if (header) {
    const match = /^Bearer\s+(\S+)$/i.exec(header);
    if (!match) throw new MeshError('GRANT_INVALID', { detail: 'the Authorization header must be "Bearer <grant>"' });
    return { token: match[1]!, inQuery: false };
  }
  return query ? { token: query, inQuery: true } : null;
}

/**
 * The grant a request to a front door carries, as the clients of those APIs can send one: `Bearer <grant>`, or HTTP
 * Basic with the grant as the password (or as the user name when the password is empty: some clients have one
 * field). An empty `Basic ` — SillyTavern's default — or `Basic` of `:` counts as no credentials.
 */
function doorTokenOf(request: FastifyRequest): string | null {
  const header = request.headers.authorization?.trim();
  if (!header) return null;
  const basic = /^Basic(?:\s+(\S*))?\s*$/i.exec(header);
  if (!basic) {
    const bearer = /^Bearer\s+(\S+)$/i.exec(header);
    if (!bearer) throw new MeshError('GRANT_INVALID', { detail: 'the Authorization header must be "Bearer <grant>", or Basic with the grant as the password' });
    return bearer[1]!;
  }
  const decoded = Buffer.from(basic[1] ?? '', 'base64').toString('utf8');
  const colon = decoded.indexOf(':');
  const user = colon < 0 ? decoded : decoded.slice(0, colon);
  const password = colon < 0 ? '' : decoded.slice(colon + 1);
  return password || user || null;
}

/** What a 401 at a door says: the challenge that makes Basic-only clients (and browsers) offer their credentials. */
const DOOR_CHALLENGE = 'Basic realm="gpumesh", charset="UTF-8"';

export function grantOf(request: FastifyRequest): VerifiedGrant {
  if (!request.grant) throw new MeshError('GRANT_MISSING');
  return request.grant;
}

/**
 * An onRequest hook from a check that throws to refuse. Callback style, not async: Fastify goes on at once after a
 * callback hook, where an async one costs a promise and a turn of the microtask queue on every request.
 */
function checkHook(check: (request: FastifyRequest) => void): onRequestHookHandler {
  return (request, _reply, done) => {
    try {
      check(request);
    } catch (error) {
      done(error as Error);
      return;
    }
    done();
  };
}

/** `METHOD /path` of a request, without its query string (which may hold a grant). */
function routeOf(request: FastifyRequest): string {
  const path = (request.raw.url ?? request.url).split('?')[0] ?? '';
  return `${request.method} ${path.slice(0, 300)}`;
}

/** Checks the grants of HTTP requests: the one object route modules use for authorization. */
export class RequestAuth {
  readonly #authority: GrantAuthority;
  readonly #uploads: UploadCredentials;
  readonly #clock: Clock;
  readonly #lifetimes: GrantLifetimes;
  readonly #doors: Pick<OpenDoors, 'grantFor'> | null;

  constructor(deps: { authority: GrantAuthority; uploads: UploadCredentials; clock: Clock; lifetimes: GrantLifetimes; doors?: Pick<OpenDoors, 'grantFor'> }) {
    this.#authority = deps.authority;
    this.#uploads = deps.uploads;
    this.#clock = deps.clock;
    this.#lifetimes = deps.lifetimes;
    this.#doors = deps.doors ?? null;
  }

  /** A route hook that admits only requests carrying an agent's upload credential (in the header); it records the batch it covers. */
  requireUpload(): onRequestHookHandler {
    return checkHook((request) => {
      const presented = tokenOf(request);
      if (!presented) throw new MeshError('GRANT_MISSING');
      if (!UploadCredentials.looksLike(presented.token)) throw new MeshError('GRANT_INVALID', { detail: 'uploads take the upload credential of the batch (from its run message)' });
      request.uploadBatch = this.#uploads.verify(presented.token, this.#clock.now()).batchId;
    });
  }

  /**
   * The hook that admits only requests whose grant allows `action`; `describe`
   * adds what the route knows from its URL. Routes use it as `onRequest`, the
   * first hook of a request, so the grant is checked before the body is read
   * or validated: a request without a grant is a 401 whatever its body, and
   * nothing of a refused body is parsed.
   */
  require(action: Action, describe?: (request: FastifyRequest) => Omit<GrantRequest, 'action'>): onRequestHookHandler {
    return checkHook((request) => {
      const presented = tokenOf(request);
      if (!presented) throw new MeshError('GRANT_MISSING');
      if (presented.inQuery && !READ_ACTIONS.has(action)) throw new MeshError('GRANT_IN_QUERY', { route: routeOf(request) });
      const now = this.#clock.now();
      const grant = this.#authority.verify(presented.token, now);
      this.#authority.authorize(grant, { action, ...describe?.(request) }, now);
      request.grant = grant;
      // Kept for routes that hand out a narrowing of it (a read-only grant in a URL).
      request.grantToken = presented.token;
    });
  }

  /**
   * `require` for a front door (ComfyUI's or AUTOMATIC1111's API): the grant may also come as HTTP Basic's password,
   * and a request without credentials from a network the owner opened the door to acts as the door's own narrowed
   * grant (mesh.yaml `doors`). A credential that is there and wrong is refused, never traded for the door's grant. A
   * refusal for missing or bad credentials carries a Basic challenge.
   */
  requireAtDoor(door: DoorName, action: Action, describe?: (request: FastifyRequest) => Omit<GrantRequest, 'action'>): onRequestHookHandler {
    return (request, reply, done) => {
      try {
        const token = doorTokenOf(request) ?? this.#doors?.grantFor(door, request.ip) ?? null;
        if (!token) throw new MeshError('GRANT_MISSING');
        const now = this.#clock.now();
        const grant = this.#authority.verify(token, now);
        this.#authority.authorize(grant, { action, ...describe?.(request) }, now);
        request.grant = grant;
        request.grantToken = token;
      } catch (error) {
        if (error instanceof MeshError && error.status === 401) reply.header('www-authenticate', DOOR_CHALLENGE);
        done(error as Error);
        return;
      }
      done();
    };
  }

  /**
   * The hook that admits any valid grant, whatever it may do (narrowing a grant, which only takes powers away). Like
   * `require`, it runs before the body is read.
   */
  requireAny(): onRequestHookHandler {
    return checkHook((request) => {
      const presented = tokenOf(request);
      if (!presented) throw new MeshError('GRANT_MISSING');
      if (presented.inQuery) throw new MeshError('GRANT_IN_QUERY', { route: routeOf(request) });
      request.grant = this.#authority.verify(presented.token, this.#clock.now());
      request.grantToken = presented.token;
    });
  }

  /** The request's grant, checked against a fuller description of what it is about to do. */
  authorizer(request: FastifyRequest): (what: GrantRequest) => void {
    return (what) => this.#authority.authorize(grantOf(request), what, this.#clock.now());
  }

  /** End something the request keeps open (an event stream) when its grant is revoked or expires; returns the stop function. */
  watch(request: FastifyRequest, onEnd: (why: GrantEnd) => void): () => void {
    return this.#lifetimes.watch(grantOf(request), onEnd);
  }

  /** Who is asking, for the audit log. */
  origin(request: FastifyRequest): RequestOrigin {
    return { actor: request.grant?.id ?? null, route: routeOf(request), client: request.ip };
  }

  now(): number {
    return this.#clock.now();
  }
}

/** Refusals the audit log keeps: the grant was missing or no good (401), did not allow the request (403), or rode in a URL. */
const auditedRefusal = (error: MeshError): boolean => error.status === 401 || error.status === 403 || error.code === 'GRANT_IN_QUERY';

/**
 * Two rules for every route, registered before the routes:
 * a grant in the URL is refused (400 GRANT_IN_QUERY) except where the route
 * allows it — even if the request also has a header, so a client that leaks
 * grants into URLs finds out at once; and every request refused for its grant
 * is written to the audit log (code, failing caveat, grant id when known,
 * route without query, client address).
 */
export function installGrantRules(app: FastifyInstance, deps: { audit: AuditLog }): void {
  app.addHook('onRequest', checkHook((request) => {
    if (queryToken(request) !== null && !queryGrantAllowed(request)) throw new MeshError('GRANT_IN_QUERY', { route: routeOf(request) });
  }));
  app.addHook('onError', async (request, _reply, error) => {
    if (!(error instanceof MeshError) || !auditedRefusal(error)) return;
    const grantId = typeof error.params.grantId === 'string' ? error.params.grantId : request.grant?.id ?? null;
    deps.audit.record({
      event: 'request:refused', grantId, route: routeOf(request), client: request.ip, status: error.status, code: error.code,
      detail: error.message.slice(0, 500),
    });
  });
}
