export { Agent, type AgentOptions } from './agent.js';
export { ControlServer, requestDrain, type DrainReport } from './control.js';
export { detectDevices, parseNvidiaSmi, cpuDevice, type DeviceOptions } from './devices.js';
export type { Engine, LoadedModel, EngineJob, JobOutput, OutputFile, Progress } from './engines/engine.js';
export { SdcppEngine, type SdcppEngineOptions } from './engines/sdcpp/index.js';
export { OpenAiImagesEngine, type OpenAiImagesEngineOptions } from './engines/openai-images/index.js';
export { frontedUrl, splitLines, type EndpointProvider, type ServerEndpoint } from './engines/http/index.js';
export type { EndpointRequest, ServerExit } from './engines/shared/endpoint.js';
export { ENGINES, ENGINE_NAMES, engineModule, buildEngines } from './engines/registry.js';
export type { EngineModule, EngineServices } from './engines/module.js';
export { ServerLauncher, type ServerLauncherOptions } from './server-launcher.js';
export {
  Governor, startServer, RestartingServer, runCommand, exitError,
  GovernanceConfig, ServerSettings, CommandSettings, ProcessLimits, EngineLimits, Readiness, RestartPolicy, LogLimits,
  type ManagedServer, type ServerLaunch, type CommandInvocation, type CommandResult, type ExitReason, type ExitKind,
  type GovernanceConfigInput, type ServerSettingsInput, type CommandSettingsInput, type ProcessLimitsInput,
} from './governance/index.js';
