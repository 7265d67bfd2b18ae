import { execFile } from 'node:child_process';
import { cpus, totalmem, freemem } from 'node:os';
import { promisify } from 'node:util';
import type { Device } from '../protocol/index.js';
import { findNvidiaSmi } from './governance/executable.js';

const run = promisify(execFile);

export interface DeviceOptions {
  /** Memory the agent may use for models on the CPU. Default: half the machine's memory, at most 8 GiB. */
  cpuBudgetMB?: number;
  /** Share of each GPU's memory the agent may fill. Default 0.9. */
  gpuBudgetFraction?: number;
  /** The nvidia-smi binary. Default: on PATH, else where the NVIDIA driver installs it (findNvidiaSmi). */
  nvidiaSmi?: string;
}

const MB = 1024 * 1024;

/** Parse `nvidia-smi --query-gpu=index,name,memory.total,memory.used --format=csv,noheader,nounits`. */
export function parseNvidiaSmi(csv: string, fraction: number): Device[] {
  return csv.split('\n').map((line) => line.trim()).filter(Boolean).map((line) => {
    const [index, name, total, used] = line.split(',').map((field) => field.trim());
    const memoryTotalMB = Number(total);
    // Caught by detectDevices, which logs it and falls back to the CPU.
    if (!index || !name || !Number.isFinite(memoryTotalMB)) throw new Error(`unexpected nvidia-smi line: ${line}`);
    return {
      id: `gpu${index}`, kind: 'gpu' as const, name, memoryTotalMB,
      budgetMB: Math.floor(memoryTotalMB * fraction), usedMB: Number(used) || 0,
    };
  });
}

export function cpuDevice(budgetMB?: number): Device {
  const memoryTotalMB = Math.floor(totalmem() / MB);
  return {
    id: 'cpu', kind: 'cpu', name: cpus()[0]?.model.trim() || 'cpu', memoryTotalMB,
    budgetMB: budgetMB ?? Math.min(8192, Math.floor(memoryTotalMB / 2)),
    usedMB: Math.floor((totalmem() - freemem()) / MB),
  };
}

/**
 * The devices of this host: every GPU nvidia-smi reports, or — when there is
 * no nvidia-smi or it fails — the CPU with a configured budget.
 */
export async function detectDevices(options: DeviceOptions = {}): Promise<Device[]> {
  try {
    const { stdout } = await run(options.nvidiaSmi ?? findNvidiaSmi(), [
      '--query-gpu=index,name,memory.total,memory.used', '--format=csv,noheader,nounits',
    ], { timeout: 5000 });
    const gpus = parseNvidiaSmi(stdout, options.gpuBudgetFraction ?? 0.9);
    if (gpus.length > 0) return gpus;
  } catch {
    // No NVIDIA driver here: the CPU is the device.
  }
  return [cpuDevice(options.cpuBudgetMB)];
}
