export { Agent, type AgentOptions } from './agent.js';
export { detectDevices, parseNvidiaSmi, cpuDevice, type DeviceOptions } from './devices.js';
export type { Engine, LoadedModel, EngineJob, JobOutput, OutputFile, Progress } from './engines/engine.js';
