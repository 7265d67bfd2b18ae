export { Agent, type AgentOptions } from './agent.js';
export { ControlServer, requestDrain, type DrainReport } from './control.js';
export { detectDevices, parseNvidiaSmi, cpuDevice, type DeviceOptions } from './devices.js';
export type { Engine, LoadedModel, EngineJob, JobOutput, OutputFile, Progress } from './engines/engine.js';
export { SdcppEngine, type SdcppEngineOptions } from './engines/sdcpp/index.js';
export { OpenAiImagesEngine, type OpenAiImagesEngineOptions } from './engines/openai-images/index.js';
export { frontedUrl, splitLines, type EndpointProvider, type ServerEndpoint } from './engines/http/index.js';
