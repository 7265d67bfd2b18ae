import { z } from 'zod';
import { Time } from './time.js';

/** One entry of the audit log as the API shows it (`GET /v1/audit`): what happened, to which grant, by whom, where. */
export const AuditView = z.strictObject({
  at: Time, event: z.string(), grantId: z.string().nullable(), actor: z.string().nullable(), route: z.string().nullable(), client: z.string().nullable(),
  status: z.int().nullable(), code: z.string().nullable(), detail: z.string().nullable(),
});
export type AuditView = z.infer<typeof AuditView>;

export const AuditPage = z.strictObject({ entries: z.array(AuditView), nextCursor: z.string().nullable() });
export type AuditPage = z.infer<typeof AuditPage>;
