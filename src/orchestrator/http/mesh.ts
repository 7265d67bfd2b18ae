import type { FastifyInstance } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { MeshError } from '../../protocol/index.js';
import { caveatsFromOptions, type GrantIssuer } from '../auth/index.js';
import type { MeshMetrics } from '../metrics.js';
import type { ModelRegistry } from '../registry/index.js';
import type { MeshStatus } from '../status.js';
import { grantOf, type RequestAuth } from './auth.js';

const names = z.array(z.string().regex(/^[A-Za-z0-9][A-Za-z0-9._:-]{0,99}$/)).min(1).optional();

const CreateGrantBody = z.strictObject({
  kind: z.enum(['admin', 'client', 'agent']),
  types: names, models: names, classes: names, hosts: names, albums: names, actions: names,
  host: z.string().regex(/^[A-Za-z0-9][A-Za-z0-9._:-]{0,99}$/).optional(),
  expires: z.string().max(40).optional(),
  maxPriority: z.int().min(1).optional(),
  rate: z.string().regex(/^\d+\/(s|m|h)$/).optional(),
  note: z.string().max(200).optional(),
});

export interface MeshRouteDeps {
  status: MeshStatus;
  metrics: MeshMetrics;
  registry: ModelRegistry;
  issuer: GrantIssuer;
  auth: RequestAuth;
}

/** Health, readiness, mesh status, metrics, models and grant minting. */
export function meshRoutes(app: FastifyInstance, deps: MeshRouteDeps): void {
  const { status, metrics, registry, issuer, auth } = deps;
  const routes = app.withTypeProvider<ZodTypeProvider>();

  routes.get('/healthz', { schema: { tags: ['health'], summary: 'The process is up' } }, async () => ({ ok: true }));

  routes.get('/readyz', { schema: { tags: ['health'], summary: 'The store is open and an agent is connected' } }, async (_request, reply) => {
    const reasons = status.notReady();
    if (reasons.length > 0) {
      void reply.code(503);
      return { error: new MeshError('NOT_READY', { detail: reasons.join('; ') }).toJSON() };
    }
    return { ok: true, agents: status.agentsConnected };
  });

  routes.get('/v1/status', {
    schema: { querystring: z.object({ access_token: z.string().optional() }), tags: ['mesh'], summary: 'Hosts, devices, resident models, queue depths' },
    preHandler: auth.require('mesh:read'),
  }, async () => status.view());

  routes.get('/v1/hosts', {
    schema: {
      querystring: z.object({ access_token: z.string().optional() }), tags: ['mesh'],
      summary: 'Every known host: connected or not, health, breakers, capacity, and each replica\'s measured throughput',
    },
    preHandler: auth.require('mesh:read'),
  }, async () => ({ hosts: status.hosts() }));

  routes.get('/metrics', {
    schema: { tags: ['mesh'], summary: 'Prometheus metrics (a grant that may read mesh status)' },
    preHandler: auth.require('mesh:read'),
  }, async (_request, reply) => {
    void reply.header('content-type', metrics.contentType);
    return metrics.text();
  });

  routes.get('/v1/models', {
    schema: { tags: ['mesh'], summary: 'Models in the registry with their policies' },
    preHandler: auth.require('mesh:read'),
  }, async () => ({
    models: registry.all().map(({ manifest, policy }) => ({ ...manifest, policy })),
  }));

  routes.post('/v1/grants', {
    schema: { body: CreateGrantBody, tags: ['grants'], summary: 'Mint a grant (admin)' },
    preHandler: auth.require('grants:create'),
  }, async (request, reply) => {
    const body = request.body;
    if (body.kind === 'agent' && !body.host) throw new MeshError('VALIDATION_FAILED', { detail: 'an agent grant needs a host' });
    let caveats: string[];
    try {
      caveats = caveatsFromOptions(body, auth.now());
    } catch (error) {
      throw new MeshError('VALIDATION_FAILED', { detail: (error as Error).message });
    }
    const minted = await issuer.mint(body.kind, caveats, body.note ?? `minted by ${grantOf(request).id}`);
    void reply.code(201);
    return { id: minted.id, kind: body.kind, token: minted.token, caveats: [`kind ${body.kind}`, ...caveats] };
  });
}
