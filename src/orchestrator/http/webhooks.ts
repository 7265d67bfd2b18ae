import type { FastifyInstance } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { WebhookDeliveries, WebhookSecretView, type WebhookDeliveryView } from '../../protocol/api/index.js';
import type { VerifiedGrant } from '../auth/index.js';
import type { JobReads, Pipelines } from '../jobs/index.js';
import type { DeliveryRecord } from '../store/index.js';
import { redactedUrl, type Webhooks } from '../webhooks/index.js';
import { grantOf, type RequestAuth } from './auth.js';
import { errorAnswers, json } from './openapi.js';

/** What the routes ask of the callbacks: URLs checked, secrets, a job's deliveries. */
export type WebhookService = Pick<Webhooks, 'deliveriesOf' | 'check' | 'checkResolved' | 'secretFor'>;

export interface WebhookRouteDeps {
  reads: Pick<JobReads, 'record'>;
  pipelines: Pick<Pipelines, 'record'>;
  webhooks: WebhookService;
  auth: RequestAuth;
}

const SubjectParams = z.object({ id: z.string().min(1).max(100) });

const iso = (ms: number | null): string | null => (ms === null ? null : new Date(ms).toISOString());

/** A delivery as the API shows it. */
export function deliveryView(record: DeliveryRecord): WebhookDeliveryView {
  return {
    id: record.id, event: record.eventType, url: redactedUrl(record.url), status: record.status, attempts: record.attempts,
    lastStatus: record.lastStatus, lastError: record.lastError, nextAttemptAt: record.status === 'pending' ? iso(record.nextAt) : null,
    createdAt: iso(record.createdAt)!, lastAttemptAt: iso(record.triedAt), finishedAt: iso(record.finishedAt),
  };
}

/**
 * GET /v1/jobs/:id/webhooks and GET /v1/pipelines/:id/webhooks (the deliveries of a job's or a pipeline's end, to
 * whoever may read it); POST /v1/webhooks/secret (admin).
 */
export function webhookRoutes(app: FastifyInstance, deps: WebhookRouteDeps): void {
  const { reads, pipelines, webhooks, auth } = deps;
  const routes = app.withTypeProvider<ZodTypeProvider>();
  const deliveries = (what: 'job' | 'pipeline', find: (grant: VerifiedGrant, id: string) => Promise<{ id: string }>) => {
    routes.get(`/v1/${what}s/:id/webhooks`, {
      schema: {
        params: SubjectParams, tags: [`${what}s`],
        summary: `The deliveries of the ${what}'s end to its callback URL: status, attempts, last error, next try (empty: it has no callback, or has not ended)`,
      },
      config: { openapi: { responses: { 200: json('Its deliveries, oldest first', WebhookDeliveries), ...errorAnswers({ 404: `No such ${what} that this grant may see` }) } } },
      onRequest: auth.require('jobs:read'),
    }, async (request) => {
      const subject = await find(grantOf(request), request.params.id);
      return { deliveries: (await webhooks.deliveriesOf(subject.id)).map(deliveryView) };
    });
  };
  deliveries('job', (grant, id) => reads.record(grant, id));
  deliveries('pipeline', (grant, id) => pipelines.record(grant, id));

  routes.post('/v1/webhooks/secret', {
    schema: {
      body: z.strictObject({ url: z.string().min(1).max(2000) }), tags: ['grants'],
      summary: 'The secret deliveries to a callback URL are signed with (whsec_…), for its receiver; the URL must be one webhooks.allow allows (admin)',
    },
    config: { openapi: { responses: { 200: json('The URL and its secret', WebhookSecretView), ...errorAnswers({ 403: 'The URL is not allowed (WEBHOOK_NOT_ALLOWED)' }) } } },
    onRequest: auth.require('grants:create'),
  }, async (request) => {
    const url = webhooks.check(request.body.url);
    return { url, secret: webhooks.secretFor(url) };
  });
}
