import type { FastifyInstance } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { ExplainView } from '../../protocol/api/index.js';
import type { JobExplainer, JobReads } from '../jobs/index.js';
import { grantOf, type RequestAuth } from './auth.js';
import { errorAnswers, json } from './openapi.js';

export interface ExplainRouteDeps {
  reads: Pick<JobReads, 'record'>;
  explainer: JobExplainer;
  auth: RequestAuth;
}

/** GET /v1/jobs/:id/explain: where a job went and why, or why it still waits. Seen by whoever may see the job. */
export function explainRoutes(app: FastifyInstance, deps: ExplainRouteDeps): void {
  const { reads, explainer, auth } = deps;
  app.withTypeProvider<ZodTypeProvider>().get('/v1/jobs/:id/explain', {
    schema: {
      params: z.object({ id: z.string().min(1).max(100) }), tags: ['jobs'],
      summary: 'Each attempt with the routing decision behind it; for a queued job, its place in the queue, what it waits for and why each host cannot take it yet',
    },
    config: { openapi: { responses: { 200: json('Where the job went and why, or why it waits', ExplainView), ...errorAnswers({ 404: 'No such job that this grant may see' }) } } },
    onRequest: auth.require('jobs:read'),
  }, async (request) => explainer.explain(await reads.record(grantOf(request), request.params.id)));
}
