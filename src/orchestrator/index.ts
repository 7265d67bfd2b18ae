/**
 * The orchestrator's public surface: what the CLI starts (`serve`, `up`: the orchestrator, alone or standing by on a
 * shared store, from a config) and what else it needs of the orchestrator's own (narrowing a grant offline, the
 * built-in models' files). Everything else is internal. Loading it loads the whole orchestrator (Fastify, the
 * stores): a command imports it when it needs it, not at the CLI's start.
 */
export { Orchestrator, type OrchestratorOptions } from './orchestrator.js';
export { startSharedOrchestrator } from './standby/shared-orchestrator.js';
export { resolveConfig, loadConfigFile, checkTlsSettings, MeshConfigInput, type MeshConfig } from './config/config.js';
export { narrowGrant } from './auth/index.js';
export { builtinModels } from '../builtin-models/index.js';
