import { randomUUID } from 'node:crypto';
import fastifyMultipart from '@fastify/multipart';
import type {} from '@fastify/websocket';
import type { FastifyInstance, FastifyRequest, onRequestHookHandler } from 'fastify';
import { z } from 'zod';
import { isTerminal, MeshError } from '../../../protocol/index.js';
import type { Action, GrantRequest } from '../../auth/index.js';
import type { BlobReader } from '../../blobs/blob-reader.js';
import type { ClientBlobs } from '../../blobs/client-blobs.js';
import type { EventBus } from '../../events/event-bus.js';
import type { BlobVisibility, ClientCancel, JobAdmission, JobOutputs, JobReads } from '../../jobs/index.js';
import type { ModelRegistry } from '../../registry/index.js';
import type { HostRegistry, WorkflowFit } from '../../routing/index.js';
import { grantOf, type RequestAuth } from '../auth.js';
import {
  HISTORY_DOCS, INTERRUPT_DOCS, OBJECT_INFO_DOCS, PROMPT_DOCS, PROMPT_HISTORY_DOCS, QUEUE_CHANGE_DOCS, QUEUE_DOCS, QUEUE_INFO_DOCS, SOCKET_DOCS,
  SYSTEM_STATS_DOCS, UPLOAD_IMAGE_DOCS, UPLOAD_MASK_DOCS, VIEW_DOCS,
} from './docs.js';
import { installComfyErrors } from './errors.js';
import { upload, view } from './files.js';
import { HISTORY_DEFAULT_ITEMS, PromptHistory } from './history.js';
import { objectInfo, systemStats } from './info.js';
import { PromptBook } from './prompt-book.js';
import { promptJob } from './prompts.js';
import { changeQueue, interrupt, queueOf } from './queue.js';
import { ClientSockets } from './sockets.js';

/** What the door takes from the orchestrator's parts. */
export interface ComfyUiRouteDeps {
  admission: Pick<JobAdmission, 'submit'>;
  reads: Pick<JobReads, 'viewOf' | 'byKey'>;
  cancels: Pick<ClientCancel, 'cancel'>;
  events: EventBus;
  registry: ModelRegistry;
  /** The connected hosts: their ComfyUIs' catalogues and devices. */
  hosts: HostRegistry;
  workflowFit: Pick<WorkflowFit, 'check'>;
  /** mesh.yaml's routing of the `workflow` job type (undefined: not routed) and its default model. */
  workflowRouting: { classes: readonly string[] | undefined; defaultModel: string | undefined };
  clientBlobs: ClientBlobs;
  reader: BlobReader;
  outputs: Pick<JobOutputs, 'blobRecord'>;
  visibility: Pick<BlobVisibility, 'assertVisible'>;
  auth: RequestAuth;
  /** The largest picture an upload may carry (the client upload limit). */
  uploadLimitBytes: number;
  version: string;
}

/** The door's parts, as its modules take them: the orchestrator's, and what the door keeps itself. */
export interface ComfyDoorDeps extends ComfyUiRouteDeps {
  book: PromptBook;
  history: PromptHistory;
  sockets: ClientSockets;
}

/** Where ComfyUI serves each route as well: its page's newer clients (and proxies in front) use `/api/…`. */
const PREFIXES = ['', '/api'] as const;

const HistoryQuery = z.object({ max_items: z.coerce.number().int().min(1).max(1000).optional() });
const PromptIdParams = z.object({ prompt_id: z.string().min(1).max(200) });
const NodeClassParams = z.object({ node_class: z.string().min(1).max(200) });
const workflowJobs = (): Omit<GrantRequest, 'action'> => ({ jobType: 'workflow' });

/**
 * The ComfyUI-compatible front door (docs/api.md, "ComfyUI-compatible API"): ComfyUI's own routes at the
 * orchestrator's root and under `/api`, as its server.py answers them, so a client written for ComfyUI — its
 * `websockets_api_example.py`, Open WebUI, SillyTavern — pointed at the mesh reaches every ComfyUI in the house as one.
 * At the root because such clients rewrite the whole path of the address they are given (SillyTavern sets it to
 * `/prompt`), so no prefix would survive; the paths are free there (gpumesh's own API is under `/v1`). Each prompt is
 * a `workflow` job — admission, grants, priorities, routing to a host whose ComfyUI has its nodes and models, breakers,
 * retries, the gallery — and every answer, errors too, is in ComfyUI's shape.
 */
export function comfyUiRoutes(app: FastifyInstance, deps: ComfyUiRouteDeps): void {
  const book = new PromptBook();
  const door: ComfyDoorDeps = {
    ...deps, book, history: new PromptHistory({ reads: deps.reads, book }), sockets: new ClientSockets({ events: deps.events, reads: deps.reads, book }),
  };
  for (const prefix of PREFIXES) app.register(async (scope) => doorRoutes(scope, door, prefix === '/api'), { prefix });
}

async function doorRoutes(scope: FastifyInstance, deps: ComfyDoorDeps, hide: boolean): Promise<void> {
  const { auth } = deps;
  /**
   * The grant check of a door route, before its body is read: a grant as Bearer or as HTTP Basic's password, or — for
   * a request without credentials from a network the owner opened the door to (mesh.yaml `doors.comfyui`) — the
   * door's own narrowed grant. The WebSocket's is checked before the upgrade.
   */
  const guard = (action: Action, describe?: (request: FastifyRequest) => Omit<GrantRequest, 'action'>): onRequestHookHandler => auth.requireAtDoor('comfyui', action, describe);
  installComfyErrors(scope);
  // ComfyUI reads a body as JSON whatever its type says: SillyTavern sends text/plain, urllib form-encoded.
  scope.removeAllContentTypeParsers();
  await scope.register(fastifyMultipart, { limits: { fileSize: deps.uploadLimitBytes, files: 4, fields: 16, fieldSize: 4096, parts: 24 }, throwFileSizeLimit: true });
  scope.addContentTypeParser('*', { parseAs: 'string' }, (_request, body, done) => done(null, body));
  // What the door serves is data, never a page of this origin (a catalogue is what agents said).
  scope.addHook('onSend', (_request, reply, payload, done) => {
    void reply.header('x-content-type-options', 'nosniff');
    done(null, payload);
  });
  const schema = (summary: string, more: Record<string, unknown> = {}) => ({ tags: ['comfyui'], summary, hide, ...more });

  scope.post('/prompt', {
    schema: schema('ComfyUI: queue an API-format workflow (a workflow job on a host whose ComfyUI has its nodes and models)'),
    config: { openapi: PROMPT_DOCS },
    onRequest: guard('jobs:submit', workflowJobs),
  }, async (request) => {
    const grant = grantOf(request);
    const { body, promptId, clientId } = promptJob(request, grant, deps);
    const { job, created } = await deps.admission.submit(grant, body, auth.authorizer(request));
    if (created) {
      const entry = { promptId, job };
      deps.book.add(grant.id, entry);
      if (clientId) deps.sockets.watch(grant.id, clientId, entry);
    }
    return { prompt_id: promptId, number: job.seq, node_errors: {} };
  });

  scope.get('/prompt', {
    schema: schema('ComfyUI: how many of this grant\'s prompts are still to end'), config: { openapi: QUEUE_INFO_DOCS }, onRequest: guard('jobs:read'),
  }, async (request) => ({ exec_info: { queue_remaining: deps.book.entries(grantOf(request).id).filter((entry) => !isTerminal(entry.job.status)).length } }));

  scope.get('/history', {
    schema: schema('ComfyUI: this grant\'s finished prompts (the newest; max_items)', { querystring: HistoryQuery }), config: { openapi: HISTORY_DOCS }, onRequest: guard('jobs:read'),
  }, async (request, reply) => {
    const { max_items: max } = HistoryQuery.parse(request.query);
    return reply.type('application/json; charset=utf-8').send(await deps.history.all(grantOf(request), max ?? HISTORY_DEFAULT_ITEMS));
  });

  scope.get('/history/:prompt_id', {
    schema: schema('ComfyUI: one prompt\'s history, once it finished', { params: PromptIdParams }), config: { openapi: PROMPT_HISTORY_DOCS }, onRequest: guard('jobs:read'),
  }, async (request, reply) => reply.type('application/json; charset=utf-8').send(await deps.history.one(grantOf(request), (request.params as { prompt_id: string }).prompt_id)));

  scope.get('/view', {
    schema: schema('ComfyUI: a file a prompt made (type output or temp) or this grant uploaded (type input)'), config: { openapi: VIEW_DOCS }, onRequest: guard('artifacts:read'),
  }, async (request, reply) => view(request, reply, deps));

  for (const [path, mask, docs] of [['/upload/image', false, UPLOAD_IMAGE_DOCS], ['/upload/mask', true, UPLOAD_MASK_DOCS]] as const) {
    scope.post(path, {
      schema: schema(mask ? 'ComfyUI: upload a mask (its alpha laid over the picture original_ref names)' : 'ComfyUI: upload a picture a workflow\'s LoadImage can name', { consumes: ['multipart/form-data'] }),
      config: { openapi: docs }, onRequest: guard('blobs:write'),
    }, async (request) => upload(request, deps, mask));
  }

  scope.get('/queue', { schema: schema('ComfyUI: this grant\'s prompts running and waiting'), config: { openapi: QUEUE_DOCS }, onRequest: guard('jobs:read') }, async (request) => queueOf(request, deps));

  scope.post('/queue', {
    schema: schema('ComfyUI: take waiting prompts out of the queue ({delete: [ids]} or {clear: true})'), config: { openapi: QUEUE_CHANGE_DOCS }, onRequest: guard('jobs:cancel'),
  }, async (request, reply) => {
    await changeQueue(request, deps);
    return reply.send();
  });

  scope.post('/interrupt', {
    schema: schema('ComfyUI: stop a running prompt (prompt_id), or this grant\'s running prompts'), config: { openapi: INTERRUPT_DOCS }, onRequest: guard('jobs:cancel'),
  }, async (request, reply) => {
    await interrupt(request, deps);
    return reply.send();
  });

  scope.get('/object_info', {
    schema: schema('ComfyUI: the node classes the mesh\'s ComfyUIs offer'), config: { openapi: OBJECT_INFO_DOCS }, onRequest: guard('jobs:submit', workflowJobs),
  }, async (request) => objectInfo(grantOf(request), deps));

  scope.get('/object_info/:node_class', {
    schema: schema('ComfyUI: one node class, if some host has it', { params: NodeClassParams }), config: { openapi: OBJECT_INFO_DOCS }, onRequest: guard('jobs:submit', workflowJobs),
  }, async (request) => {
    const name = (request.params as { node_class: string }).node_class;
    const info = objectInfo(grantOf(request), deps);
    return Object.hasOwn(info, name) ? { [name]: info[name] } : {};
  });

  scope.get('/system_stats', {
    schema: schema('ComfyUI: the orchestrator\'s machine and the devices of the hosts that run workflows'), config: { openapi: SYSTEM_STATS_DOCS }, onRequest: guard('jobs:submit', workflowJobs),
  }, async () => systemStats(deps));

  scope.route({
    method: 'GET', url: '/ws',
    schema: schema('ComfyUI: the WebSocket of a client id (?clientId=): its prompts\' progress, previews and ends'),
    config: { openapi: SOCKET_DOCS },
    onRequest: guard('jobs:read'),
    handler: async () => {
      throw new MeshError('UPGRADE_REQUIRED', {}, { headers: { upgrade: 'websocket' } });
    },
    wsHandler: (socket, request) => {
      const grant = grantOf(request);
      const asked = (request.query as { clientId?: unknown }).clientId;
      // ComfyUI makes one up for a client that names none.
      const clientId = typeof asked === 'string' && asked.length > 0 && asked.length <= 200 ? asked : randomUUID().replaceAll('-', '');
      deps.sockets.attach(grant.id, clientId, socket);
      const stop = auth.watch(request, () => socket.close(1008, 'the grant ended'));
      socket.on('close', stop);
    },
  });
}
