import { MeshError } from '../../protocol/index.js';
import { normalizeWebhookUrl, webhookOf, type VerifiedGrant } from '../auth/index.js';

/**
 * The callback URL a request names itself (a job's or a pipeline's `webhook`), in normal form; undefined when it names
 * none. A malformed one is VALIDATION_FAILED naming the field. The grant's `webhook` caveat is checked by the caller's
 * authorize (it refuses any other URL), before `callbackFor`.
 */
export function namedCallback(text: string | undefined): string | undefined {
  if (text === undefined) return undefined;
  const named = normalizeWebhookUrl(text);
  if (typeof named === 'object') throw new MeshError('VALIDATION_FAILED', { detail: `webhook: the callback URL ${named.problem}` });
  return named;
}

/**
 * Where an end is POSTed: the URL the request named, else its grant's `webhook` caveat's; null: nowhere. `check` is
 * the allowlist (Webhooks.check: WEBHOOK_NOT_ALLOWED), asked here so that work whose end could never be told is not
 * admitted — and asked again at every delivery, since the config may change and a name may resolve elsewhere. No
 * `check` (role tests without callbacks): nowhere.
 */
export function callbackFor(named: string | undefined, grant: Pick<VerifiedGrant, 'caveats'>, check: ((url: string) => string) | undefined): string | null {
  const callback = named ?? webhookOf(grant.caveats);
  return callback === null || !check ? null : check(callback);
}
