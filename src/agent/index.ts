/** The agent's public surface: what the CLI starts and talks to. Everything else is internal. */
export { Agent, type AgentOptions } from './agent.js';
export { ControlServer, controlEndpoint, requestDrain, type DrainReport } from './control.js';
export { ENGINE_NAMES } from '../protocol/engines/index.js';
export { HostConfig, type HostConfigFile } from './models/host-config.js';
