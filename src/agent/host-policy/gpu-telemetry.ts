import { execFile } from 'node:child_process';
import { promisify } from 'node:util';

const run = promisify(execFile);

/** What nvidia-smi says of one GPU now; null where the driver does not report it (`[N/A]`, `[Not Supported]`). */
export interface GpuReading {
  /** The device id as the agent names it (`gpu0`). */
  id: string;
  usedMB: number | null;
  temperatureC: number | null;
  powerW: number | null;
  powerLimitW: number | null;
}

/** A process on a GPU, as the driver lists it (compute processes; a Windows driver may not say their memory). */
export interface GpuProcess {
  device: string;
  pid: number;
  name: string;
  usedMB: number | null;
}

export interface GpuSample {
  at: number;
  gpus: GpuReading[];
  processes: GpuProcess[];
}

const number = (text: string | undefined): number | null => {
  const value = Number(text?.trim());
  return text === undefined || text.trim() === '' || !Number.isFinite(value) ? null : value;
};

/** Parse `--query-gpu=index,uuid,memory.used,temperature.gpu,power.draw,power.limit --format=csv,noheader,nounits`. */
export function parseGpuReadings(csv: string): { readings: GpuReading[]; byUuid: Map<string, string> } {
  const readings: GpuReading[] = [];
  const byUuid = new Map<string, string>();
  for (const line of csv.split('\n').map((text) => text.trim()).filter(Boolean)) {
    const [index, uuid, used, temperature, power, limit] = line.split(',').map((field) => field.trim());
    if (!index || !/^\d+$/.test(index)) continue;
    const id = `gpu${index}`;
    if (uuid) byUuid.set(uuid, id);
    readings.push({ id, usedMB: number(used), temperatureC: number(temperature), powerW: number(power), powerLimitW: number(limit) });
  }
  return { readings, byUuid };
}

/** Parse `--query-compute-apps=gpu_uuid,pid,process_name,used_memory --format=csv,noheader,nounits`. */
export function parseGpuProcesses(csv: string, byUuid: ReadonlyMap<string, string>): GpuProcess[] {
  const processes: GpuProcess[] = [];
  for (const line of csv.split('\n').map((text) => text.trim()).filter(Boolean)) {
    const fields = line.split(',').map((field) => field.trim());
    // A process name may hold commas (a Windows path): the fields around it are fixed.
    const [uuid, pid] = fields;
    const used = fields.at(-1);
    const name = fields.slice(2, -1).join(',');
    if (!uuid || !pid || !/^\d+$/.test(pid)) continue;
    processes.push({ device: byUuid.get(uuid) ?? uuid, pid: Number(pid), name, usedMB: number(used) });
  }
  return processes;
}

/**
 * Read the GPUs now: their memory in use, temperature and power, and the processes on them. Null where there is no
 * nvidia-smi or it fails (a CPU host: nothing to read, nothing made up).
 */
export async function sampleGpus(nvidiaSmi: string, now: number): Promise<GpuSample | null> {
  try {
    const options = { timeout: 5000, windowsHide: true };
    const gpus = await run(nvidiaSmi, ['--query-gpu=index,uuid,memory.used,temperature.gpu,power.draw,power.limit', '--format=csv,noheader,nounits'], options);
    const { readings, byUuid } = parseGpuReadings(gpus.stdout);
    if (readings.length === 0) return null;
    const apps = await run(nvidiaSmi, ['--query-compute-apps=gpu_uuid,pid,process_name,used_memory', '--format=csv,noheader,nounits'], options)
      .then(({ stdout }) => parseGpuProcesses(stdout, byUuid), () => []);
    return { at: now, gpus: readings, processes: apps };
  } catch {
    return null;
  }
}
