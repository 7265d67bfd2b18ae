export { Webhooks, redactedUrl, type WebhookEvent, type WebhookSettings, type WebhookSubject, type WebhooksDeps } from './webhooks.js';
export { WebhookTargets, type Refusal, type TargetRules } from './targets.js';
export { signWebhook, verifyWebhook, webhookSecret } from './signing.js';
export { callbackFor, namedCallback } from './callbacks.js';
