export { ExecEngine, type ExecEngineOptions } from './engine.js';
export { ExecSettings, splitCommand } from './settings.js';
export { LocalCommandRunner, type CommandRunner, type CommandSpec, type CommandHooks, type CommandResult } from './runner.js';
