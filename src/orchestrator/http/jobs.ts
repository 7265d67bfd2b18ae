import type { FastifyInstance } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { BulkResults, JobAccepted, JobPage, JobView } from '../../protocol/api/index.js';
import { isTerminal, JOB_STATUSES, LIMITS, SubmitJobBody, type JobStatus } from '../../protocol/index.js';
import type { EventBus } from '../events/event-bus.js';
import type { ClientCancel, JobAdmission, JobReads } from '../jobs/index.js';
import { grantOf, type RequestAuth } from './auth.js';
import { KEEPS_JSON_TEXT } from './json-text.js';
import { clientGone, jobEnd, preferredWait } from './prefer-wait.js';
import { errorAnswers, json } from './openapi.js';

const JobParams = z.object({ id: z.string().min(1).max(100) });

export interface JobRouteDeps {
  admission: JobAdmission;
  reads: JobReads;
  cancels: ClientCancel;
  events: EventBus;
  auth: RequestAuth;
}

/**
 * POST/GET /v1/jobs, POST /v1/jobs:batch, GET/DELETE /v1/jobs/:id. A job's events, its explanation, its outputs and
 * its published results are its sub-resources' files: events.ts, explain.ts, outputs.ts, gallery.ts.
 */
export function jobRoutes(app: FastifyInstance, deps: JobRouteDeps): void {
  const { admission, reads, cancels, auth, events } = deps;
  const routes = app.withTypeProvider<ZodTypeProvider>();

  routes.post('/v1/jobs', {
    schema: { body: SubmitJobBody, tags: ['jobs'], summary: 'Submit a job' },
    config: {
      // The input is stored as it was sent where that is exactly the input admitted (JobAdmission): not written out again.
      ...KEEPS_JSON_TEXT,
      openapi: {
        responses: {
          202: json('Admitted and queued (Location: the job)', JobAccepted),
          200: json('An idempotent repeat (the job its key named), or with `Prefer: wait=N` the job as it ended within N seconds', z.union([JobView, JobAccepted])),
          ...errorAnswers({
            400: 'The body, the input (named: field and why), the job type or model (VALIDATION_FAILED, INVALID_INPUT, UNKNOWN_MODEL, IMAGE_REFUSED, …)',
            413: 'The body is over the limit', 422: 'The idempotency key names a different request (IDEMPOTENCY_MISMATCH), or no connected host can run it',
            429: 'The model\'s queue or the mesh is full, or the grant\'s rate is spent (Retry-After)', 503: 'The store cannot take writes now (Retry-After)',
          }),
        },
      },
    },
    onRequest: auth.require('jobs:submit'),
  }, async (request, reply) => {
    const wait = preferredWait(request.headers.prefer);
    const grant = grantOf(request);
    // With `Prefer: wait` the job is written when it ends (JobAdmission.submit, waited), unless it is answered sooner.
    const { job, created } = await admission.submit(grant, request.body, auth.authorizer(request), wait !== null, request.jsonText ?? undefined);
    const links = { self: `/v1/jobs/${job.id}`, events: `/v1/jobs/${job.id}/events` };
    void reply.header('location', links.self);
    // `Prefer: wait=N`: answer with the finished job (200, as GET /v1/jobs/:id) if it ends within N seconds — one
    // request for a quick job instead of a 202 and an event stream. A grant that may not read jobs gets the 202.
    if (wait !== null && reads.mayRead(grant, job)) {
      // The job's own record, which its end updates in place: read back from the store, it would cost a query and a parse.
      const record = job;
      const ended = await jobEnd(events, job.id, wait * 1000, () => isTerminal(record.status), clientGone(reply));
      void reply.header('preference-applied', `wait=${wait}`);
      if (ended) return reply.code(200).send(await reads.viewOf(record));
      // The wait ran out (or the client left): the job goes on, and the 202 promises it is stored.
      await admission.persist(job);
      return reply.code(202).send({ id: job.id, status: record.status, links, created });
    }
    await admission.persist(job);
    void reply.code(created ? 202 : 200);
    return { id: job.id, status: job.status, links, created };
  });

  // `::` is a literal colon in Fastify's router: the path is /v1/jobs:batch (Google API style for a custom method).
  routes.post('/v1/jobs::batch', {
    schema: {
      body: z.strictObject({ jobs: z.array(z.unknown()).min(1).max(LIMITS.bulkJobs) }),
      tags: ['jobs'], summary: `Submit up to ${LIMITS.bulkJobs} jobs; each is admitted or refused on its own (207 with one result per job, in order)`,
    },
    bodyLimit: LIMITS.bulkBodyBytes,
    config: {
      openapi: {
        responses: {
          207: json('One result per job, in order: admitted (202, or 200 for an idempotent repeat) or refused with its error', BulkResults),
          ...errorAnswers({ 400: 'Not a list of 1 to ' + LIMITS.bulkJobs + ' jobs', 413: 'The body is over the limit' }),
        },
      },
    },
    onRequest: auth.require('jobs:submit'),
  }, async (request, reply) => {
    const results = await admission.submitMany(grantOf(request), request.body.jobs, auth.authorizer(request));
    void reply.code(207);
    return { results };
  });

  routes.get('/v1/jobs', {
    schema: {
      querystring: z.object({
        /** One status or several, comma-separated (queued,dispatched,running). */
        status: z.string().max(100).optional().transform((text, ctx) => {
          if (!text) return undefined;
          const statuses = text.split(',').map((part) => part.trim());
          const unknown = statuses.filter((status) => !(JOB_STATUSES as readonly string[]).includes(status));
          if (unknown.length > 0) {
            ctx.addIssue({ code: 'custom', message: `unknown status ${unknown.join(', ')}; use ${JOB_STATUSES.join(', ')}` });
            return z.NEVER;
          }
          return statuses as JobStatus[];
        }),
        limit: z.coerce.number().int().min(1).max(200).default(50),
        cursor: z.string().max(100).optional(),
      }),
      tags: ['jobs'], summary: 'List jobs the grant may see, newest first',
    },
    config: { openapi: { responses: { 200: json('A page of jobs; nextCursor asks for the next one', JobPage), ...errorAnswers({ 400: 'A query parameter is invalid (an unknown status, a limit out of 1–200, a bad cursor)' }) } } },
    onRequest: auth.require('jobs:read'),
  }, async (request) => reads.list(grantOf(request), { ...request.query, statuses: request.query.status }));

  routes.get('/v1/jobs/:id', {
    schema: { params: JobParams, tags: ['jobs'], summary: 'One job: status, attempts, artifacts' },
    config: { openapi: { responses: { 200: json('The job', JobView), ...errorAnswers({ 404: 'No such job that this grant may see' }) } } },
    onRequest: auth.require('jobs:read'),
  }, async (request) => reads.get(grantOf(request), request.params.id));

  routes.delete('/v1/jobs/:id', {
    schema: { params: JobParams, tags: ['jobs'], summary: 'Cancel a queued or running job' },
    config: {
      openapi: { responses: { 200: json('The job, cancelled', JobView), ...errorAnswers({ 404: 'No such job that this grant may see', 409: 'It has ended already (JOB_NOT_CANCELLABLE)' }) } },
    },
    onRequest: auth.require('jobs:cancel'),
  }, async (request) => cancels.cancel(grantOf(request), request.params.id, auth.authorizer(request)));
}
