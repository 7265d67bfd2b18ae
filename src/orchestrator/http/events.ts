import type { FastifyInstance } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { isTerminalEvent, type JobEvent } from '../../protocol/index.js';
import { artifactView, canSee, promptOf } from '../jobs/index.js';
import { artifacts, type Db, type JobRecord } from '../store/index.js';
import { grantOf, requireGrant } from './auth.js';
import type { HttpContext } from './context.js';
import { openSse } from './sse.js';

/** The events that describe where a job stands now, for a client that connects late. */
function snapshot(db: Db, job: JobRecord): JobEvent[] {
  const at = new Date(job.updatedAt).toISOString();
  const events: JobEvent[] = [{ type: 'queued', jobId: job.id, model: job.model, jobType: job.type, prompt: promptOf(job), at: new Date(job.createdAt).toISOString() }];
  if ((job.status === 'dispatched' || job.status === 'running') && job.leaseHost && job.batchId) {
    events.push({
      type: 'dispatched', jobId: job.id, host: job.leaseHost, replica: `${job.leaseHost}/${job.model}`, batchId: job.batchId,
      batchSize: job.batchSize ?? 1, attempt: job.attempts, at,
    });
    if (job.status === 'running') events.push({ type: 'running', jobId: job.id, host: job.leaseHost, at });
  }
  const finishedAt = new Date(job.finishedAt ?? job.updatedAt).toISOString();
  if (job.status === 'succeeded') {
    events.push({ type: 'succeeded', jobId: job.id, result: job.result, at: finishedAt, artifacts: artifacts.artifactsOfJob(db, job.id).map(artifactView) });
  } else if (job.status === 'failed') {
    events.push({ type: 'failed', jobId: job.id, at: finishedAt, error: { code: job.errorCode ?? 'INTERNAL', message: job.errorMessage ?? '' } });
  } else if (job.status === 'cancelled' || job.status === 'expired') {
    events.push({ type: job.status, jobId: job.id, at: finishedAt });
  }
  return events;
}

/** GET /v1/jobs/:id/events and GET /v1/events (Server-Sent Events). */
export function eventRoutes(app: FastifyInstance, context: HttpContext): void {
  const routes = app.withTypeProvider<ZodTypeProvider>();

  routes.get('/v1/jobs/:id/events', {
    schema: { params: z.object({ id: z.string().min(1).max(100) }), tags: ['events'], summary: "One job's events (SSE); ends after the terminal event" },
    onRequest: requireGrant(context, 'jobs:read'),
  }, async (request, reply) => {
    const job = context.jobs.record(grantOf(request), request.params.id);
    // Subscribe before reading the state so nothing falls between the two.
    let live = false;
    const stream = openSse(request, reply, () => unsubscribe());
    const deliver = (event: JobEvent, id?: string): void => {
      stream.send(event.type, event, id);
      if (isTerminalEvent(event)) stream.close();
    };
    const buffered: { event: JobEvent; id: string }[] = [];
    const unsubscribe = context.events.subscribeJob(job.id, ({ event, id }) => (live ? deliver(event, id) : buffered.push({ event, id })));
    const current = context.jobs.record(grantOf(request), job.id);
    for (const event of snapshot(context.db, current)) deliver(event);
    live = true;
    for (const { event, id } of buffered) deliver(event, id);
  });

  routes.get('/v1/events', {
    schema: { tags: ['events'], summary: 'Every job event the grant may see (SSE); honours Last-Event-ID' },
    onRequest: requireGrant(context, 'jobs:read'),
  }, async (request, reply) => {
    const grant = grantOf(request);
    const lastEventId = request.headers['last-event-id'];
    const stream = openSse(request, reply, () => subscription.unsubscribe());
    const subscription = context.events.subscribeAll(({ event, scope, id }) => {
      if (canSee(grant, scope, context.clock.now())) stream.send(event.type, event, id);
    }, typeof lastEventId === 'string' ? lastEventId : undefined);
    // A reconnect whose gap cannot be replayed (the orchestrator restarted) is told to resync from the API.
    if (!subscription.replayed) stream.send('resync', { reason: 'events since Last-Event-ID are not available; reload from /v1/jobs and /v1/artifacts' });
  });
}
