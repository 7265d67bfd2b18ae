import { EngineError } from '../core/engine.js';
import { buildArgv, expandString, TemplateError, type Variables } from './command-template.js';
import { resolveExecutable } from './executable.js';

export interface LaunchInput {
  /** The command template. */
  command: string;
  /** Extra environment from the settings; values may use the variables. */
  env: Readonly<Record<string, string>>;
  variables: Variables;
  /** The GPU (nvidia-smi index) the process may use; null: none. */
  gpu: number | null;
  /** The environment to start from. Default: the agent's. */
  baseEnv?: NodeJS.ProcessEnv;
  cwd?: string;
}

export interface Launch {
  file: string;
  args: string[];
  env: NodeJS.ProcessEnv;
}

/**
 * The executable, arguments and environment of an engine process. The
 * environment is the agent's without its GPUMESH_* variables (the agent's
 * grant must not reach third-party servers or user scripts), plus the
 * settings' `env`, plus the GPU the process may see: CUDA_VISIBLE_DEVICES in
 * nvidia-smi's (PCI bus) order, so the index means the same GPU to both.
 */
export function prepareLaunch(input: LaunchInput): Launch {
  try {
    const env: NodeJS.ProcessEnv = {};
    for (const [key, value] of Object.entries(input.baseEnv ?? process.env)) if (!key.startsWith('GPUMESH_')) env[key] = value;
    env.CUDA_DEVICE_ORDER = 'PCI_BUS_ID';
    env.CUDA_VISIBLE_DEVICES = input.gpu === null ? '' : String(input.gpu);
    const expanded: Record<string, string> = {};
    for (const [key, value] of Object.entries(input.env)) expanded[key] = expandString(value, input.variables);
    Object.assign(env, expanded);
    const [command, ...args] = buildArgv(input.command, { ...expanded, ...input.variables });
    return { file: resolveExecutable(command!, env, input.cwd), args, env };
  } catch (error) {
    if (error instanceof TemplateError) throw new EngineError('ENGINE_FAILED', `bad command template "${input.command}": ${error.message}`, false, { cause: error });
    throw error;
  }
}
