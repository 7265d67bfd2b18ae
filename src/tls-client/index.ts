// The client side of TLS, shared by the agent and the CLI. The orchestrator's side (the private CA
// and its server certificate) is in src/orchestrator/tls-server/, so clients never load the X.509 builder.
export { TLS_CA_PATH, TLS_CA_CAVEAT, certificateFingerprint, isFingerprint, parseFingerprint } from './fingerprint.js';
export { ServerTrust, TlsPinError, pinsOfGrant, type Pin, type TrustedRequestInit } from './pinning.js';
