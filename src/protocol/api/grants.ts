import { z } from 'zod';
import { Time } from './time.js';

/** A recorded grant as the API shows it (`GET /v1/grants`, `DELETE /v1/grants/:id`). */
export const GrantView = z.strictObject({
  id: z.string(), kind: z.string(), note: z.string().nullable(), caveats: z.array(z.string()).nullable(), createdAt: Time, revokedAt: Time.nullable(),
});
export type GrantView = z.infer<typeof GrantView>;

/** `POST /v1/grants`: the grant minted. */
export const Minted = z.strictObject({ id: z.string(), kind: z.string(), token: z.string().describe('the grant: send it as "Authorization: Bearer <token>"'), caveats: z.array(z.string()) });
export type Minted = z.infer<typeof Minted>;

/** `POST /v1/grants:narrow`: the grant sent, narrowed. */
export const Narrowed = z.strictObject({ token: z.string(), caveats: z.array(z.string()) });
export type Narrowed = z.infer<typeof Narrowed>;

export const GrantPage = z.strictObject({ grants: z.array(GrantView), nextCursor: z.string().nullable() });
export type GrantPage = z.infer<typeof GrantPage>;
