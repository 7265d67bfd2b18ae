import { createHmac, timingSafeEqual } from 'node:crypto';

/**
 * Standard Webhooks signatures (standardwebhooks.com): `webhook-signature: v1,<base64 HMAC-SHA256>` of
 * `<webhook-id>.<webhook-timestamp>.<body>`, keyed by the endpoint's secret `whsec_<base64>` (the bytes after the
 * prefix, base64-decoded). Made with node:crypto: HMAC is one call, not worth a dependency.
 */

/** Why the secrets are what they are: a key of its own for webhooks, taken from the root key, so no secret is stored. */
const SECRET_LABEL = 'gpumesh webhook secret v1';

/**
 * The secret of one callback URL: HMAC-SHA256 of the URL (normal form) under a key derived from the orchestrator's root
 * key. Nothing is stored and every orchestrator sharing the root key signs alike; the same URL always has the same
 * secret (so all grants and jobs that name it share it, as Standard Webhooks means: one secret per endpoint), and it
 * changes only with the root key. Shown to admins only (`grant create --webhook`, `POST /v1/webhooks:secret`).
 */
export function webhookSecret(rootKey: Uint8Array, url: string): string {
  const key = createHmac('sha256', rootKey).update(SECRET_LABEL).digest();
  return `whsec_${createHmac('sha256', key).update(url).digest('base64')}`;
}

function keyOf(secret: string): Buffer {
  return Buffer.from(secret.startsWith('whsec_') ? secret.slice('whsec_'.length) : secret, 'base64');
}

/** The `webhook-signature` value for one try. */
export function signWebhook(secret: string, id: string, timestampS: number, body: string): string {
  return `v1,${createHmac('sha256', keyOf(secret)).update(`${id}.${timestampS}.${body}`).digest('base64')}`;
}

/**
 * Whether headers and body carry a valid signature by `secret`, sent within `toleranceS` of `nowS` (what a receiver
 * checks; docs/api.md shows the same in a few lines).
 */
export function verifyWebhook(secret: string, headers: { id: string; timestamp: string; signature: string }, body: string, nowS: number, toleranceS = 300): boolean {
  const timestamp = Number(headers.timestamp);
  if (!Number.isInteger(timestamp) || Math.abs(nowS - timestamp) > toleranceS) return false;
  const expected = Buffer.from(signWebhook(secret, headers.id, timestamp, body).slice(3), 'base64');
  return headers.signature.split(' ').some((entry) => {
    const [version, value] = entry.split(',');
    if (version !== 'v1' || !value) return false;
    const given = Buffer.from(value, 'base64');
    return given.length === expected.length && timingSafeEqual(given, expected);
  });
}
