import { z } from 'zod';
import { Time } from './time.js';

/**
 * Callbacks as the API shows them: each delivery of a job's (or a pipeline's) end to its callback URL, and a callback
 * URL's signing secret (admins only).
 */

/** One event on its way to a callback URL, and how its delivery went so far. */
export const WebhookDeliveryView = z.strictObject({
  id: z.string().describe('sent as webhook-id on every try: receivers de-duplicate by it'),
  event: z.string().describe('the body\'s type: job.succeeded, job.failed, job.cancelled, job.expired; pipeline.succeeded, pipeline.failed, pipeline.cancelled, pipeline.expired'),
  url: z.string().describe('the callback URL, its query left out (it may carry the receiver\'s token)'),
  status: z.enum(['pending', 'delivered', 'failed']).describe('pending: being tried; delivered: answered 2xx; failed: given up'),
  attempts: z.int(),
  lastStatus: z.int().nullable().describe('the HTTP status of the last answer; null: none yet, or no answer'),
  lastError: z.string().nullable().describe('why the last try failed'),
  nextAttemptAt: Time.nullable().describe('when the next try is due (pending only)'),
  createdAt: Time,
  lastAttemptAt: Time.nullable(),
  finishedAt: Time.nullable().describe('when it was delivered or given up'),
});
export type WebhookDeliveryView = z.infer<typeof WebhookDeliveryView>;

/** `GET /v1/jobs/:id/webhooks`, `GET /v1/pipelines/:id/webhooks`. */
export const WebhookDeliveries = z.strictObject({ deliveries: z.array(WebhookDeliveryView) });
export type WebhookDeliveries = z.infer<typeof WebhookDeliveries>;

/** A callback URL and the secret its deliveries are signed with (`whsec_…`, Standard Webhooks). */
export const WebhookSecretView = z.strictObject({
  url: z.string().describe('the callback URL, in the form it is kept and signed for'),
  secret: z.string().describe('whsec_<base64>: verify webhook-signature with it; the same for every grant and job naming this URL'),
});
export type WebhookSecretView = z.infer<typeof WebhookSecretView>;
