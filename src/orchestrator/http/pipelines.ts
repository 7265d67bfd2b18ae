import type { FastifyInstance } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { isTerminalEvent, PipelineAccepted, PipelineView, type JobEvent } from '../../protocol/api/index.js';
import { LIMITS, SubmitPipelineBody } from '../../protocol/index.js';
import type { EventBus } from '../events/event-bus.js';
import type { JobReads, Pipelines } from '../jobs/index.js';
import { grantOf, QUERY_GRANT_ALLOWED, type RequestAuth } from './auth.js';
import { errorAnswers, json } from './openapi.js';
import { openSse } from './sse.js';

export interface PipelineRouteDeps {
  pipelines: Pipelines;
  reads: Pick<JobReads, 'snapshot'>;
  events: EventBus;
  auth: RequestAuth;
}

const PipelineParams = z.object({ id: z.string().min(1).max(100) });

/**
 * POST /v1/pipelines, GET/DELETE /v1/pipelines/:id and GET /v1/pipelines/:id/events: steps submitted at once, each a
 * job (jobs.ts), followed by one id and one event stream.
 */
export function pipelineRoutes(app: FastifyInstance, deps: PipelineRouteDeps): void {
  const { pipelines, reads, events, auth } = deps;
  const routes = app.withTypeProvider<ZodTypeProvider>();

  routes.post('/v1/pipelines', {
    schema: {
      body: SubmitPipelineBody, tags: ['pipelines'],
      summary: `Submit up to ${LIMITS.pipeline.steps} steps at once, later ones taking earlier ones' outputs ({"fromStep": "<id>", "output": 0}); all are admitted or none`,
    },
    config: {
      openapi: {
        responses: {
          202: json('Admitted: each step\'s job (Location: the pipeline)', PipelineAccepted),
          ...errorAnswers({
            400: 'The body, or a step (PIPELINE_INVALID naming the field: an unknown or cyclic reference, a chain too deep, a step\'s input)',
            403: 'The grant may not submit a step, or read a step another takes the output of', 404: 'A step names a job (fromJob) this grant may not see',
            413: 'The body is over the limit', 422: 'A step names a job that failed (SOURCE_FAILED), or no connected host can run a step',
            429: 'A queue or the mesh is full, or the grant\'s rate is spent (Retry-After)', 503: 'The store cannot take writes now (Retry-After)',
          }),
        },
      },
    },
    onRequest: auth.require('jobs:submit'),
  }, async (request, reply) => {
    const accepted = await pipelines.submit(grantOf(request), request.body, auth.authorizer(request));
    void reply.header('location', accepted.links.self).code(202);
    return accepted;
  });

  routes.get('/v1/pipelines/:id', {
    schema: { params: PipelineParams, tags: ['pipelines'], summary: 'A pipeline: where it stands, and each step\'s job' },
    config: { openapi: { responses: { 200: json('The pipeline', PipelineView), ...errorAnswers({ 404: 'No such pipeline of this grant\'s lineage' }) } } },
    onRequest: auth.require('jobs:read'),
  }, async (request) => pipelines.get(grantOf(request), request.params.id));

  routes.delete('/v1/pipelines/:id', {
    schema: { params: PipelineParams, tags: ['pipelines'], summary: 'Cancel every step that has not ended' },
    config: { openapi: { responses: { 200: json('The pipeline, its unfinished steps cancelled', PipelineView), ...errorAnswers({ 404: 'No such pipeline of this grant\'s lineage' }) } } },
    onRequest: auth.require('jobs:cancel'),
  }, async (request) => pipelines.cancel(grantOf(request), request.params.id, auth.authorizer(request)));

  routes.get('/v1/pipelines/:id/events', {
    schema: { params: PipelineParams, tags: ['pipelines', 'events'], summary: 'Every step\'s job events on one stream (SSE); ends once every step has ended' },
    config: {
      ...QUERY_GRANT_ALLOWED,
      openapi: {
        responses: {
          200: { description: 'Server-Sent Events: each step\'s job events (`event: <type>`, `data:` the event, its `jobId` naming the step\'s job)', content: { 'text/event-stream': { type: 'string' } } },
          ...errorAnswers({ 404: 'No such pipeline of this grant\'s lineage' }),
        },
      },
    },
    onRequest: auth.require('jobs:read'),
  }, async (request, reply) => {
    const grant = grantOf(request);
    const pipeline = await pipelines.record(grant, request.params.id);
    const open = new Set(pipeline.steps.map((step) => step.jobId));
    let live = false;
    const buffered: { event: JobEvent; id?: string; data?: string }[] = [];
    const stream = openSse(request, reply, () => {
      for (const unsubscribe of unsubscribes) unsubscribe();
      stopWatching();
    }, events.clock);
    const stopWatching = auth.watch(request, () => stream.close());
    const deliver = (event: JobEvent, eventId?: string, json?: string): void => {
      if (!open.has(event.jobId)) return;
      stream.send(event.type, event, eventId, json);
      if (isTerminalEvent(event)) open.delete(event.jobId);
      if (open.size === 0) stream.close();
    };
    // Subscribe before reading where the steps stand, so nothing falls between the two.
    const unsubscribes = pipeline.steps.map((step) => events.subscribeJob(step.jobId, (scoped) => (live ? deliver(scoped.event, scoped.id, scoped.data) : buffered.push(scoped))));
    for (const step of pipeline.steps) for (const event of await reads.snapshot(grant, step.jobId)) deliver(event);
    live = true;
    for (const { event, id, data } of buffered) deliver(event, id, data);
  });
}
