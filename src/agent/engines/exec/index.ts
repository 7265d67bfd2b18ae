import type { EngineModule } from '../kit/module.js';
import { ExecEngine } from './engine.js';
import { GovernedCommandRunner } from './governed-runner.js';
import { execDescriptor, type ExecSettings } from '../../../protocol/engines/exec.js';

export { ExecEngine, type ExecEngineOptions } from './engine.js';
export { ExecSettings } from '../../../protocol/engines/exec.js';
export { splitCommand } from './command.js';
export { LocalCommandRunner, type CommandRunner, type CommandSpec, type CommandHooks, type CommandResult } from './runner.js';
export { GovernedCommandRunner } from './governed-runner.js';

/** The agent's side of the engine: its descriptor and how to build it (engines/registry.ts). */
export const execEngine: EngineModule<typeof ExecSettings> = {
  descriptor: execDescriptor,
  create: ({ governor }) => new ExecEngine({ runner: new GovernedCommandRunner(governor) }),
};
