import { Command } from 'commander';
import type { Device, ResidentModel } from '../../protocol/index.js';
import { clientFrom, type ClientOptions } from '../settings.js';
import { printJson, table } from '../output.js';
import { withClientOptions } from './shared.js';

interface Status {
  hosts: {
    id: string; classes: string[]; engines: string[]; devices: Device[]; resident: ResidentModel[];
    batchesInFlight: number; jobsInFlight: number; lastSeenAt: string;
  }[];
  queues: Record<string, { depth: number; limit: number }>;
  jobs: Record<string, number>;
}

async function status(options: ClientOptions & { json?: boolean }): Promise<void> {
  const client = clientFrom(options);
  const current = await client.request<Status>('GET', '/v1/status');
  if (options.json) return printJson(current);
  const out: string[] = [`mesh at ${client.baseUrl}`, ''];
  out.push(current.hosts.length === 0 ? 'hosts: none connected' : table(
    ['HOST', 'CLASSES', 'DEVICE', 'MEMORY (used/budget/total MB)', 'RESIDENT', 'IN FLIGHT'],
    current.hosts.flatMap((host) => host.devices.map((device, index) => [
      index === 0 ? host.id : '', index === 0 ? host.classes.join(',') : '', `${device.id} ${device.name}`,
      `${device.usedMB}/${device.budgetMB}/${device.memoryTotalMB}`,
      host.resident.filter((model) => model.device === device.id).map((model) => `${model.model} (${model.memoryMB} MB)`).join(', ') || '-',
      index === 0 ? `${host.jobsInFlight} jobs` : '',
    ])),
  ));
  out.push('', table(['MODEL', 'QUEUED', 'LIMIT'], Object.entries(current.queues).map(([model, queue]) => [model, String(queue.depth), String(queue.limit)])));
  out.push('', `jobs: ${Object.entries(current.jobs).map(([state, count]) => `${state} ${count}`).join(', ') || 'none yet'}`);
  process.stdout.write(`${out.join('\n')}\n`);
}

export function statusCommand(): Command {
  return withClientOptions(new Command('status'))
    .description('Show hosts, their devices and memory, resident models and queue depths')
    .option('--json', 'print JSON')
    .action((options) => status(options));
}
