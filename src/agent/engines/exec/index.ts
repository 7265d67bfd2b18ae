import type { EngineModule } from '../module.js';
import { ExecEngine } from './engine.js';
import { GovernedCommandRunner } from './governed-runner.js';
import { ExecSettings } from './settings.js';

export { ExecEngine, type ExecEngineOptions } from './engine.js';
export { ExecSettings, splitCommand } from './settings.js';
export { LocalCommandRunner, type CommandRunner, type CommandSpec, type CommandHooks, type CommandResult } from './runner.js';
export { GovernedCommandRunner } from './governed-runner.js';

/** Models that are commands, run once per batch or per job, under the agent's governance (engines/registry.ts). */
export const execEngine: EngineModule<typeof ExecSettings> = {
  name: 'exec', settings: ExecSettings, server: false, needsFile: false,
  create: ({ governor }) => new ExecEngine({ runner: new GovernedCommandRunner(governor) }),
};
