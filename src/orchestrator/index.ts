export { Orchestrator, type OrchestratorOptions } from './orchestrator.js';
export { resolveConfig, loadConfigFile, ConfigError, MeshConfigInput, type MeshConfig } from './config/config.js';
export { narrowGrant, caveatsFromOptions, type GrantOptions } from './auth/index.js';
