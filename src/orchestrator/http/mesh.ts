import type { FastifyInstance } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { MeshError } from '../../protocol/index.js';
import { caveatsFromOptions } from '../auth/index.js';
import { grants, jobs as jobStore } from '../store/index.js';
import { grantOf, requireGrant } from './auth.js';
import type { HttpContext } from './context.js';

const names = z.array(z.string().regex(/^[A-Za-z0-9][A-Za-z0-9._:-]{0,99}$/)).min(1).optional();

const CreateGrantBody = z.strictObject({
  kind: z.enum(['admin', 'client', 'agent']),
  types: names, models: names, classes: names, albums: names, actions: names,
  host: z.string().regex(/^[A-Za-z0-9][A-Za-z0-9._:-]{0,99}$/).optional(),
  expires: z.string().max(40).optional(),
  maxPriority: z.int().min(1).optional(),
  rate: z.string().regex(/^\d+\/(s|m|h)$/).optional(),
  note: z.string().max(200).optional(),
});

/** Health, readiness, mesh status, models and grant minting. */
export function meshRoutes(app: FastifyInstance, context: HttpContext): void {
  const routes = app.withTypeProvider<ZodTypeProvider>();

  routes.get('/healthz', { schema: { tags: ['health'], summary: 'The process is up' } }, async () => ({ ok: true }));

  routes.get('/readyz', { schema: { tags: ['health'], summary: 'The store is open and an agent is connected' } }, async (_request, reply) => {
    const reasons: string[] = [];
    if (!context.db.open) reasons.push('the store is closed');
    if (context.hub.size === 0) reasons.push('no agent is connected');
    if (reasons.length > 0) {
      void reply.code(503);
      return { error: new MeshError('NOT_READY', { detail: reasons.join('; ') }).toJSON() };
    }
    return { ok: true, agents: context.hub.size };
  });

  routes.get('/v1/status', {
    schema: { querystring: z.object({ access_token: z.string().optional() }), tags: ['mesh'], summary: 'Hosts, devices, resident models, queue depths' },
    preHandler: requireGrant(context, 'mesh:read'),
  }, async () => ({
    hosts: [...context.hub.hosts()].map((host) => ({
      id: host.id, classes: host.info.classes, engines: host.info.engines, version: host.info.version,
      concurrency: host.info.concurrency, devices: host.devices, resident: host.resident,
      batchesInFlight: host.batches.size, jobsInFlight: host.jobsInFlight,
      connectedAt: new Date(host.connectedAt).toISOString(), lastSeenAt: new Date(host.lastSeenAt).toISOString(),
    })),
    queues: Object.fromEntries(context.registry.all().map((model) => [model.manifest.name, {
      depth: context.scheduler.depth(model.manifest.name), limit: model.policy.maxQueueSize,
    }])),
    jobs: jobStore.countByStatus(context.db),
  }));

  routes.get('/metrics', {
    schema: { tags: ['mesh'], summary: 'Prometheus metrics (a grant that may read mesh status)' },
    preHandler: requireGrant(context, 'mesh:read'),
  }, async (_request, reply) => {
    void reply.header('content-type', context.metrics.contentType);
    return context.metrics.text();
  });

  routes.get('/v1/models', {
    schema: { tags: ['mesh'], summary: 'Models in the registry with their policies' },
    preHandler: requireGrant(context, 'mesh:read'),
  }, async () => ({
    models: context.registry.all().map(({ manifest, policy }) => ({ ...manifest, policy })),
  }));

  routes.post('/v1/grants', {
    schema: { body: CreateGrantBody, tags: ['grants'], summary: 'Mint a grant (admin)' },
    preHandler: requireGrant(context, 'grants:create'),
  }, async (request, reply) => {
    const body = request.body;
    if (body.kind === 'agent' && !body.host) throw new MeshError('VALIDATION_FAILED', { detail: 'an agent grant needs a host' });
    let caveats: string[];
    try {
      caveats = caveatsFromOptions(body, context.clock.now());
    } catch (error) {
      throw new MeshError('VALIDATION_FAILED', { detail: (error as Error).message });
    }
    const minted = context.authority.mint(body.kind, caveats);
    grants.recordGrant(context.db, { id: minted.id, kind: body.kind, note: body.note ?? `minted by ${grantOf(request).id}` }, context.clock.now());
    void reply.code(201);
    return { id: minted.id, kind: body.kind, token: minted.token, caveats: minted.caveats };
  });
}
