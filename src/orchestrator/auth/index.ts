export { GrantAuthority, narrowGrant, firstFailure, capsOf, type VerifiedGrant, type GrantRate, type GrantCap, type GrantCaps } from './grants.js';
export {
  ACTIONS, CAP_CONDITIONS, CONDITIONS, CONDITIONS_BY_KIND, GRANT_KINDS, KIND_ACTIONS, READ_ACTIONS, RATE_UNITS, parseCaveat, formatCaveat, checkCaveat, scopeProblem,
  webhookOf, normalizeWebhookUrl, MAX_WEBHOOK_URL,
} from './caveats.js';
export type { Action, CapCondition, Caveat, Condition, GrantKind, GrantRequest } from './caveats.js';
export { GrantIssuer, type GrantIssuerDeps, type RequestOrigin } from './issuer.js';
export { GrantLifetimes, type GrantEnd } from './lifetimes.js';
export { UploadCredentials } from './upload-credentials.js';
