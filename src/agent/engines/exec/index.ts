import type { EngineModule } from '../module.js';
import { ExecEngine } from './engine.js';
import { ExecSettings } from './settings.js';

export { ExecEngine, type ExecEngineOptions } from './engine.js';
export { ExecSettings, splitCommand } from './settings.js';
export { LocalCommandRunner, type CommandRunner, type CommandSpec, type CommandHooks, type CommandResult } from './runner.js';

/** Models that are commands, run once per batch or per job (engines/registry.ts). */
export const execEngine: EngineModule<typeof ExecSettings> = {
  name: 'exec', settings: ExecSettings, server: false, needsFile: false,
  create: () => new ExecEngine(),
};
