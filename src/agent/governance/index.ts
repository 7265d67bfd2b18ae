/**
 * Process governance: how the agent starts, limits, watches and stops engine
 * processes without a daemon. Engine adapters use `startServer` /
 * `RestartingServer` for servers and `runCommand` for per-batch commands;
 * the agent builds one `Governor` at start.
 */
export { Governor, type GovernorOptions } from './governor.js';
export { GovernedProcess, type SpawnSpec, type StdioSlot } from './governed-process.js';
export { startServer, type ManagedServer, type ServerLaunch } from './managed-server.js';
export { RestartingServer, restartDelay, type RestartingServerOptions } from './restarting-server.js';
export { runCommand, type CommandInvocation, type CommandResult } from './command-runner.js';
export { classifyExit, describeExit, exitError, type ExitKind, type ExitReason, type ProcessEnd, type StopCause } from './exit-reason.js';
export { buildArgv, expandString, TemplateError } from './command-template.js';
export { LogTail } from './log-tail.js';
export { systemClock, type Clock, type Timer } from '../../protocol/clock.js';
export {
  CommandSettings, EngineLimits, GovernanceConfig, LogLimits, ProcessLimits, Readiness, RestartPolicy, ServerSettings,
  type CommandSettingsInput, type GovernanceConfigInput, type ProcessLimitsInput, type ServerSettingsInput,
} from '../../protocol/engines/process-settings.js';
