import type { FastifyInstance } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { Draining, Hosts } from '../../protocol/api/index.js';
import { MeshError } from '../../protocol/index.js';
import type { AuditLog } from '../auth/audit.js';
import type { AgentHub } from '../link/agent-hub.js';
import type { MeshStatus } from '../status/mesh-status.js';
import type { RequestAuth } from './auth.js';
import { errorAnswers, json } from './openapi.js';

const HostParams = z.object({ id: z.string().min(1).max(100) });

export interface HostRouteDeps {
  status: MeshStatus;
  hub: AgentHub;
  audit: AuditLog;
  auth: RequestAuth;
}

/**
 * `/v1/hosts`: every host the orchestrator knows, and draining one. A drained host (an admin's POST
 * /v1/hosts/:id/drain) gets no new work from then on (the router skips draining hosts); its agent is sent `drain`,
 * finishes what it holds and leaves once every result is acknowledged. The agent on the host itself drains the same
 * way on SIGTERM or `gpumesh agent drain`.
 */
export function hostRoutes(app: FastifyInstance, deps: HostRouteDeps): void {
  const { status, auth } = deps;
  const routes = app.withTypeProvider<ZodTypeProvider>();

  routes.get('/v1/hosts', {
    schema: { tags: ['mesh'], summary: 'Every known host: connected or not, health, breakers, capacity, and each replica\'s measured throughput' },
    config: { openapi: { responses: { 200: json('Every host the orchestrator knows of', Hosts), ...errorAnswers({}) } } },
    onRequest: auth.require('mesh:read'),
  }, async () => ({ hosts: status.hosts() }));

  routes.post('/v1/hosts/:id/drain', {
    schema: {
      params: HostParams, tags: ['mesh'],
      summary: 'Drain a host: it finishes its work in flight, takes no more, and its agent leaves (admin; audited)',
    },
    config: { openapi: { responses: { 202: json('Draining: it takes no more work and leaves once its jobs in flight end', Draining), ...errorAnswers({ 404: 'No such connected host' }) } } },
    onRequest: auth.require('hosts:drain'),
  }, async (request, reply) => {
    const session = deps.hub.drain(request.params.id);
    if (!session) throw new MeshError('NOT_FOUND', { what: `connected host "${request.params.id}"` });
    deps.audit.record({ event: 'admin:action', ...auth.origin(request), detail: `drained host ${session.id}` });
    void reply.code(202);
    return { host: session.id, draining: true, jobsInFlight: session.jobsInFlight };
  });
}
