export { GrantAuthority, narrowGrant, inspectGrant, firstFailure, type VerifiedGrant } from './grants.js';
export { ACTIONS, GRANT_KINDS, KIND_ACTIONS, parseCaveat, formatCaveat, checkCaveat } from './caveats.js';
export type { Action, Caveat, GrantKind, GrantRequest } from './caveats.js';
export { caveatsFromOptions, type GrantOptions } from './options.js';
export { GrantIssuer, type GrantIssuerDeps } from './issuer.js';
export { UploadCredentials } from './upload-credentials.js';
