import type { FastifyInstance, FastifyReply, FastifyRequest, onRequestHookHandler } from 'fastify';
import type {} from '@fastify/websocket';
import { z } from 'zod';
import { ErrorEnvelope } from '../../../protocol/api/index.js';
import { familyOf, LINK_LIMITS, MeshError } from '../../../protocol/index.js';
import type { Clock } from '../../../protocol/clock.js';
import type { ModelRegistry } from '../../registry/index.js';
import type { HostRegistry } from '../../routing/index.js';
import { relayHttp, RELAYED_ANSWER_HEADERS } from '../../relay/http-pipe.js';
import type { Relays, RelayTarget } from '../../relay/relays.js';
import { SocketPipe } from '../../relay/socket-pipe.js';
import type { RequestAuth } from '../auth.js';
import { BINARY, errorResponses, type DocResponse, type RouteDocs } from '../openapi.js';
import { withRawBodies } from '../raw-bodies.js';

export interface PassthroughRouteDeps {
  auth: RequestAuth;
  relays: Relays;
  hosts: HostRegistry;
  registry: ModelRegistry;
  clock: Clock;
  /** A WebSocket client that answers no ping this long is taken for gone (agents.link.relays.idleMs). */
  relayIdleMs: number;
}

/** Where the pass-through is: `/comfyui/<host>/<model>/<ComfyUI's own path>`. */
export const PASSTHROUGH_PREFIX = '/comfyui';
const URL_PATTERN = `${PASSTHROUGH_PREFIX}/:host/:model/*`;
/** Seconds a client is told to wait for a host that is not connected. */
const OFFLINE_RETRY_S = 10;

const Params = z.object({
  host: z.string().min(1).max(100).describe('the host whose ComfyUI to reach (its id, as `gpumesh status` lists it)'),
  model: z.string().min(1).max(200).describe('the ComfyUI model of that host, passed through by its owner (`passthrough: true`)'),
  '*': z.string().describe('ComfyUI\'s own path (`system_stats`, `prompt`, `view`, `api/…`), relayed with the query string as it is'),
});
type Params = z.infer<typeof Params>;

/** Upgrades whose client sent no credentials: a connection probe (see `grantOrProbe`). */
const probes = new WeakSet<FastifyRequest>();
/** ComfyUI's socket, opened before the client's upgrade is answered, by request. */
const pipes = new WeakMap<FastifyRequest, SocketPipe>();

const isUpgrade = (request: FastifyRequest): boolean => request.headers.upgrade?.toLowerCase() === 'websocket';

/**
 * A WebSocket upgrade that carries no credentials at all is let through, to be closed at once (1008) with nothing
 * relayed: Krita's AI Diffusion plugin probes `/ws` at connect without the token it sends with every other request
 * (comfy_client.py `connect`: `websocket_args(self._token)`, the cloud token, empty for a server of one's own), and
 * refuses a server whose probe fails. A probe learns nothing — not whether the host or model exists. Every other
 * request, and every upgrade that carries credentials, meets the grant check as usual.
 */
function grantOrProbe(check: onRequestHookHandler): onRequestHookHandler {
  return function (this: FastifyInstance, request, reply, done) {
    check.call(this, request, reply, (error?: Error) => {
      if (error instanceof MeshError && error.code === 'GRANT_MISSING' && isUpgrade(request)) {
        probes.add(request);
        return done();
      }
      done(error);
    });
  };
}

/**
 * The ComfyUI pass-through (docs/api.md, "ComfyUI pass-through"): every method at `/comfyui/<host>/<model>/…`, and
 * the WebSocket there, relayed to that host's ComfyUI of that model over the host's agent link (orchestrator/relay/).
 * The grant — a Bearer token, HTTP Basic's password, or the ComfyUI door's grant for a network its owner opened
 * (`doors.comfyui`) — must allow `jobs:submit` on the model and the host (its `models` and `hosts` caveats apply, and
 * its `types` must allow `image` or `workflow`); the host's owner must have opened the model (`passthrough: true`).
 * The client's Authorization header never reaches ComfyUI, nor do its cookies.
 */
export function passthroughRoutes(app: FastifyInstance, deps: PassthroughRouteDeps): void {
  const { auth, relays, clock, relayIdleMs } = deps;
  const describe = (request: FastifyRequest) => {
    const { host, model } = request.params as Partial<Params>;
    return { host, model };
  };
  // The grant as any front door takes it (Bearer, or Basic's password), or the door an owner opened to a network; then
  // its `types`: what a client does with a ComfyUI is pictures, or whole workflows (the ComfyUI door's jobs).
  const door = auth.requireAtDoor('comfyui', 'jobs:submit', describe);
  const grant: onRequestHookHandler = function (this: FastifyInstance, request, reply, done) {
    door.call(this, request, reply, (error?: Error) => {
      if (error) return done(error);
      try {
        comfyWork(auth, request, describe(request));
      } catch (refused) {
        return done(refused as Error);
      }
      done();
    });
  };
  const relay = async (request: FastifyRequest, reply: FastifyReply): Promise<void> => {
    const { host, model } = request.params as Params;
    await relayHttp(relays, targetOf(deps, host, model), relayedPath(request), request, reply);
  };

  withRawBodies(app, (routes) => {
    routes.route({
      method: ['GET', 'HEAD'], url: URL_PATTERN,
      schema: { params: Params, tags: ['comfyui'], summary: 'ComfyUI pass-through: a GET to the host\'s ComfyUI, or its WebSocket (`…/ws?clientId=`) relayed per client' },
      config: { openapi: docs('GET', true) },
      onRequest: grantOrProbe(grant),
      // A WebSocket's other end is opened first: a host that cannot serve it is an HTTP answer, not a dead socket.
      preHandler: async (request) => {
        if (!isUpgrade(request) || probes.has(request)) return;
        const { host, model } = request.params as Params;
        const pipe = SocketPipe.start(relays, targetOf(deps, host, model), relayedPath(request), request.headers, { clock, idleMs: relayIdleMs });
        pipes.set(request, pipe);
        // The client may go before its upgrade is answered (while ComfyUI's socket opens, too): the relay ends with it.
        const socket = request.raw.socket;
        if (socket.destroyed) pipe.abandon();
        else socket.once('close', () => {
          if (pipes.get(request) === pipe) pipe.abandon();
        });
        try {
          await pipe.opened;
        } catch (error) {
          pipes.delete(request);
          throw error;
        }
      },
      handler: relay,
      wsHandler: (socket, request) => {
        if (probes.has(request)) {
          request.log.info({ url: request.url.split('?')[0] }, 'pass-through WebSocket without credentials: closed at once (a connection probe)');
          return socket.close(1008, 'send a grant: Authorization: Bearer <grant>');
        }
        const pipe = pipes.get(request)!;
        pipes.delete(request);
        pipe.attach(socket);
      },
    });
    // Two declarations only so that the document gives a body to the methods that take one.
    for (const [methods, body] of [[['POST', 'PUT', 'PATCH'], true], [['DELETE', 'OPTIONS'], false]] as const) {
      routes.route({
        method: [...methods], url: URL_PATTERN,
        schema: { params: Params, tags: ['comfyui'], summary: `ComfyUI pass-through: the request relayed to the host's ComfyUI${body ? ', its body streamed' : ''}` },
        config: { openapi: docs(body ? 'POST' : 'DELETE', false) },
        onRequest: grant,
        handler: relay,
      });
    }
  });
}

/** Job types a grant's `types` must allow one of for ComfyUI's work: its pictures, or whole workflows. */
const COMFY_WORK = ['image', 'workflow'] as const;

/** Throws the refusal of the first of COMFY_WORK when the grant allows none of them. */
function comfyWork(auth: RequestAuth, request: FastifyRequest, about: { host?: string | undefined; model?: string | undefined }): void {
  const authorize = auth.authorizer(request);
  let refusal: unknown = null;
  for (const jobType of COMFY_WORK) {
    try {
      return authorize({ action: 'jobs:submit', jobType, ...about });
    } catch (error) {
      refusal ??= error;
    }
  }
  throw refusal;
}

/**
 * Where a pass-through goes: a connected host whose owner opened this ComfyUI model. Refusals name what is missing:
 * 404 for what does not exist or is not opened (a client's mistake), 503 for a host that is not connected or takes
 * nothing now (it may come back).
 */
function targetOf(deps: Pick<PassthroughRouteDeps, 'hosts' | 'registry'>, host: string, model: string): RelayTarget {
  const notFound = (detail: string): MeshError => new MeshError('PASSTHROUGH_NOT_FOUND', { host, model, detail });
  const registered = deps.registry.described(model);
  if (!registered) throw notFound(`this mesh has no model "${model}"`);
  if (registered.manifest.engine !== 'comfyui') throw notFound(`"${model}" is a ${registered.manifest.engine} model; only ComfyUI models are passed through`);
  const info = deps.hosts.info(host);
  if (!info) throw notFound(`no host "${host}" has joined this mesh`);
  if (!info.passthrough?.includes(familyOf(model))) {
    throw notFound(`the owner of host "${host}" has not opened the ComfyUI of "${model}" to clients (passthrough: true in the model's settings, in that host's own config)`);
  }
  const session = deps.hosts.get(host);
  const unavailable = (code: 'HOST_OFFLINE' | 'RELAY_UNAVAILABLE', detail: string): MeshError =>
    new MeshError(code, { host, model, detail, retryAfter: OFFLINE_RETRY_S }, { headers: { 'retry-after': String(OFFLINE_RETRY_S) } });
  if (!session) throw unavailable('HOST_OFFLINE', 'its agent\'s link is down');
  if (!session.mayServe(model)) throw notFound(`the grant host "${host}" joined with does not allow model "${model}"`);
  if (session.draining) throw unavailable('RELAY_UNAVAILABLE', `host "${host}" is draining`);
  if (session.away) throw unavailable('RELAY_UNAVAILABLE', `host "${host}" takes no work now (${session.away.state}: ${session.away.reason})`);
  return { session, manifest: registered.manifest };
}

/** ComfyUI's path and query, as the client sent them (still percent-encoded): what follows `/comfyui/<host>/<model>`. */
function relayedPath(request: FastifyRequest): string {
  const url = request.raw.url ?? '/';
  const query = url.indexOf('?');
  const path = query < 0 ? url : url.slice(0, query);
  // `/comfyui/<host>/<model>` is three segments: ComfyUI's path starts at the fourth slash.
  let at = 0;
  for (let slashes = 0; slashes < 4 && at >= 0; slashes++) at = path.indexOf('/', slashes === 0 ? 0 : at + 1);
  const relayed = `${at < 0 ? '/' : path.slice(at)}${query < 0 ? '' : url.slice(query)}`;
  if (relayed.length > LINK_LIMITS.relayPathChars) throw new MeshError('URI_TOO_LONG', { limit: LINK_LIMITS.relayPathChars });
  return relayed;
}

/** What /openapi.json says of the pass-through: whatever ComfyUI answers, and the mesh's own refusals. */
function docs(method: 'GET' | 'POST' | 'DELETE', websocket: boolean): RouteDocs {
  const upgraded: Record<number, DocResponse> = websocket
    ? { 101: { description: 'The WebSocket, relayed: ComfyUI\'s JSON and binary messages to the client, the client\'s to ComfyUI' } } : {};
  return {
    wildcard: 'path',
    ...(method === 'POST' ? { body: { '*/*': { ...BINARY, description: 'relayed to ComfyUI as it is, streamed' } } } : {}),
    responses: {
      200: {
        description: 'What ComfyUI answers, status, headers and body (hop-by-hop headers and cookies left out; sandboxed: '
          + `${Object.entries(RELAYED_ANSWER_HEADERS).map(([name, value]) => `${name}: ${value}`).join(', ')})`,
        content: { '*/*': BINARY },
      },
      ...upgraded,
      ...errorResponses(ErrorEnvelope, {
        400: 'A path parameter is invalid', 401: 'No grant, or one that is not valid', 403: 'The grant does not allow jobs:submit on this model and host',
        404: 'No such model or host, not a ComfyUI model, or not opened by its host\'s owner (PASSTHROUGH_NOT_FOUND)',
        414: 'ComfyUI\'s path and query are over 8,192 characters (URI_TOO_LONG)',
        502: 'ComfyUI could not be reached, or the host\'s link dropped before it answered (RELAY_FAILED)',
        503: 'The host is not connected (HOST_OFFLINE), or cannot take this now: draining, its owner\'s, busy (RELAY_UNAVAILABLE); with Retry-After',
      }),
    },
  };
}
