import { Command } from 'commander';
import type { Device, ResidentModel } from '../../protocol/index.js';
import { clientFrom, type ClientOptions } from '../settings.js';
import { printJson, table } from '../output.js';
import { withClientOptions } from './shared.js';

interface Status {
  hosts: {
    id: string; classes: string[]; engines: string[]; devices: Device[]; resident: ResidentModel[];
    batchesInFlight: number; jobsInFlight: number; lastSeenAt: string; draining?: boolean;
  }[];
  queues: Record<string, { depth: number; limit: number }>;
  replicas?: Record<string, {
    desired: number; min: number; max: number | null; demand: number;
    replicas: { host: string; state: string; held: boolean }[];
  }>;
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
      index === 0 ? `${host.id}${host.draining ? ' (draining)' : ''}` : '', index === 0 ? host.classes.join(',') : '', `${device.id} ${device.name}`,
      `${device.usedMB}/${device.budgetMB}/${device.memoryTotalMB}`,
      host.resident.filter((model) => model.device === device.id).map((model) => `${model.model} (${model.memoryMB} MB)`).join(', ') || '-',
      index === 0 ? `${host.jobsInFlight} jobs` : '',
    ])),
  ));
  out.push('', table(['MODEL', 'QUEUED', 'LIMIT', 'REPLICAS', 'WHERE'], Object.entries(current.queues).map(([model, queue]) => {
    const replicas = current.replicas?.[model];
    if (!replicas) return [model, String(queue.depth), String(queue.limit), '-', '-'];
    const ready = replicas.replicas.filter((replica) => replica.state === 'ready').length;
    const where = replicas.replicas.map((replica) => `${replica.host} (${replica.state}${replica.held ? ', held' : ''})`).join(', ');
    return [
      model, String(queue.depth), String(queue.limit),
      `${ready}/${replicas.desired} (min ${replicas.min}, max ${replicas.max ?? 'any'})`, where || '-',
    ];
  })));
  out.push('', `jobs: ${Object.entries(current.jobs).map(([state, count]) => `${state} ${count}`).join(', ') || 'none yet'}`);
  process.stdout.write(`${out.join('\n')}\n`);
}

export function statusCommand(): Command {
  return withClientOptions(new Command('status'))
    .description('Show hosts, their devices and memory, resident models, queue depths and each model\'s replicas (ready/desired, where)')
    .option('--json', 'print JSON')
    .action((options) => status(options));
}
