import type { FastifyInstance } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { MeshError } from '../../protocol/index.js';
import type { AuditLog } from '../auth/audit.js';
import type { AgentHub } from '../link/agent-hub.js';
import type { RequestAuth } from './auth.js';
import { DrainingSchema, errorAnswers, json } from './answers.js';

/**
 * POST /v1/hosts/:id/drain: an admin takes a host out of the mesh. The host gets no new work from now on
 * (the router skips draining hosts), its agent is sent `drain`, finishes what it holds and leaves once every
 * result is acknowledged. The agent on the host itself drains the same way on SIGTERM or `gpumesh agent drain`.
 */
export function drainRoutes(app: FastifyInstance, deps: { hub: AgentHub; auth: RequestAuth; audit: AuditLog }): void {
  const routes = app.withTypeProvider<ZodTypeProvider>();
  routes.post('/v1/hosts/:id/drain', {
    schema: {
      params: z.object({ id: z.string().min(1).max(100) }), tags: ['mesh'],
      summary: 'Drain a host: it finishes its work in flight, takes no more, and its agent leaves (admin; audited)',
    },
    config: { openapi: { responses: { 202: json('Draining: it takes no more work and leaves once its jobs in flight end', DrainingSchema), ...errorAnswers({ 404: 'No such connected host' }) } } },
    onRequest: deps.auth.require('hosts:drain'),
  }, async (request, reply) => {
    const session = deps.hub.drain(request.params.id);
    if (!session) throw new MeshError('NOT_FOUND', { what: `connected host "${request.params.id}"` });
    deps.audit.record({ event: 'admin:action', ...deps.auth.origin(request), detail: `drained host ${session.id}` });
    void reply.code(202);
    return { host: session.id, draining: true, jobsInFlight: session.jobsInFlight };
  });
}
