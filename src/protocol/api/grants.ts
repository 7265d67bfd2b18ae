import { z } from 'zod';
import { WebhookSecretView } from './webhooks.js';
import { Time } from './time.js';

/** A cap of a grant and its lineage's use of it now. */
export const CapUse = z.strictObject({
  limit: z.number().describe('the cap: jobs queued at once, or device-seconds per UTC day'),
  used: z.number().describe('queued now, or device-seconds used today (to the tenth)'),
  left: z.number(),
  refillsAt: Time.nullable().describe('when device time counts from zero again (the next UTC midnight); null for queued jobs, which drain as they leave'),
});
export type CapUse = z.infer<typeof CapUse>;

/** The caps a grant carries (`max-queued`, `device-seconds-per-day`), each null where it has none. */
export const GrantCapsView = z.strictObject({ maxQueued: CapUse.nullable(), deviceSecondsPerDay: CapUse.nullable() });
export type GrantCapsView = z.infer<typeof GrantCapsView>;

/** A recorded grant as the API shows it (`GET /v1/grants`, `GET` and `DELETE /v1/grants/:id`). */
export const GrantView = z.strictObject({
  id: z.string(), kind: z.string(), note: z.string().nullable(), caveats: z.array(z.string()).nullable(), createdAt: Time, revokedAt: Time.nullable(),
  caps: GrantCapsView.describe('the caps the grant was minted with, and its lineage\'s use of them now'),
});
export type GrantView = z.infer<typeof GrantView>;

/** `POST /v1/grants`: the grant minted. */
export const Minted = z.strictObject({
  id: z.string(), kind: z.string(), token: z.string().describe('the grant: send it as "Authorization: Bearer <token>"'), caveats: z.array(z.string()),
  /** Its `webhook` caveat's URL and that URL's signing secret: give the secret to the receiver, and to nobody else. */
  webhook: WebhookSecretView.optional().describe('the callback URL its jobs call and the secret their deliveries are signed with'),
});
export type Minted = z.infer<typeof Minted>;

/** `POST /v1/grants:narrow`: the grant sent, narrowed. */
export const Narrowed = z.strictObject({ token: z.string(), caveats: z.array(z.string()) });
export type Narrowed = z.infer<typeof Narrowed>;

export const GrantPage = z.strictObject({ grants: z.array(GrantView), nextCursor: z.string().nullable() });
export type GrantPage = z.infer<typeof GrantPage>;
