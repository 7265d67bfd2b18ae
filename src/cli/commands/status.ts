import { Command } from 'commander';
import type { BreakerView, Hosts, HostView, StatusView, StorageView } from '../../protocol/api/index.js';
import { JOB_STATUSES } from '../../protocol/index.js';
import { clientFrom, type ClientOptions } from '../common/settings.js';
import { ApiError } from '../common/client.js';
import { formatBytes, printJson, table } from '../common/output.js';
import { withClientOptions } from './shared.js';

/** `GET /v1/status`; an orchestrator older than replicas sends no `models`. */
type Status = Omit<StatusView, 'models'> & Partial<Pick<StatusView, 'models'>>;

/** `open until 12:00:03 (2nd time)`, `half-open (1 trial ok)`, `closed`. */
function breakerText(breaker: BreakerView): string {
  if (breaker.state === 'open') return `open until ${breaker.openUntil?.slice(11, 19) ?? '?'}${breaker.opens > 1 ? ` (${breaker.opens} times)` : ''}`;
  if (breaker.state === 'half-open') return `half-open (${breaker.trialSuccesses} trial${breaker.trialSuccesses === 1 ? '' : 's'} ok)`;
  return breaker.consecutiveFailures > 0 ? `closed (${breaker.consecutiveFailures} failed)` : 'closed';
}

function hostsTable(hosts: HostView[]): string {
  return table(
    ['HOST', 'CLASSES', 'DEVICE', 'MEMORY (used/budget/total MB)', 'RESIDENT', 'IN FLIGHT', 'SLOTS FREE', 'HEALTH', 'LINK BREAKER'],
    hosts.flatMap((host) => (host.devices.length > 0 ? host.devices : [null]).map((device, index) => [
      index === 0 ? host.id : '', index === 0 ? host.classes.join(',') : '', device ? `${device.id} ${device.name}` : '-',
      device ? `${device.usedMB}/${device.budgetMB}/${device.memoryTotalMB}` : '-',
      host.resident.filter((model) => model.device === device?.id).map((model) => `${model.model} (${model.memoryMB} MB)`).join(', ') || '-',
      index === 0 ? `${host.jobsInFlight} jobs` : '',
      index === 0 ? `${host.freeSlots}/${host.concurrency}` : '',
      index === 0 ? `${host.health}${host.draining ? ', draining' : ''}` : '',
      index === 0 ? breakerText(host.breaker) : '',
    ])),
  );
}

/**
 * The energy jobs took on GPUs that report their power, since the orchestrator started:
 * `energy: gen 1.23 Wh · laptop 1.23 Wh (since the orchestrator started)`; null when none was reported.
 */
export function energyLine(energy: StatusView['energy'] | undefined): string | null {
  const entries = [...Object.entries(energy?.byModel ?? {}), ...Object.entries(energy?.byHost ?? {})];
  if (entries.length === 0) return null;
  const wh = (value: number): string => (value >= 10 ? value.toFixed(1) : value >= 0.01 ? value.toFixed(2) : value.toPrecision(2));
  return `energy: models ${Object.entries(energy!.byModel).map(([name, value]) => `${name} ${wh(value)} Wh`).join(', ')}; hosts ${Object.entries(energy!.byHost).map(([name, value]) => `${name} ${wh(value)} Wh`).join(', ')} (since the orchestrator started)`;
}

/**
 * Each front door opened to networks for requests without credentials:
 * `door comfyui: open without credentials to 192.168.1.0/24 as grant Ab3… (types workflow; max-queued 4)`.
 */
export function doorLines(doors: StatusView['doors'] | undefined): string[] {
  return (doors ?? []).map((door) => `door ${door.door}: open without credentials to ${door.openTo.join(', ')} as grant ${door.grantId} (${door.caveats.join('; ')})`);
}

/** A time of day as `status` shows it (the terminal's zone): `22:04`. */
const clockTime = (iso: string): string => new Date(iso).toTimeString().slice(0, 5);

/**
 * What each host can and cannot serve beyond its classes: `vm  video: off — ffmpeg not found (…)` for a class it was
 * meant to serve and cannot, the ffmpeg it encodes clips with (path, where from, version), how it governs its engines,
 * the ComfyUIs its owner opened to clients (`studio  ComfyUI of krita passed through at /comfyui/studio/krita/`),
 * and why it takes no work now (`laptop  yielded since 21:04: game.exe holds 6.1 GB on gpu0`).
 */
export function capabilityLines(hosts: HostView[]): string[] {
  const width = Math.max(0, ...hosts.map((host) => host.id.length));
  const lines: string[] = [];
  for (const host of hosts) {
    for (const [klass, reason] of Object.entries(host.unavailable ?? {})) lines.push(`${host.id.padEnd(width)}  ${klass}: off — ${reason}`);
    for (const tool of host.tools ?? []) lines.push(`${host.id.padEnd(width)}  ${tool.name}: ${tool.path} (${tool.source}; ${tool.version})`);
    if (host.platform && host.governance) lines.push(`${host.id.padEnd(width)}  ${host.platform} · ${host.governance}`);
    if (host.engineUser) lines.push(`${host.id.padEnd(width)}  engines run as ${host.engineUser}`);
    for (const model of host.passthrough ?? []) lines.push(`${host.id.padEnd(width)}  ComfyUI of ${model} passed through at /comfyui/${host.id}/${model}/`);
    if (host.away) lines.push(`${host.id.padEnd(width)}  ${host.away.state} since ${clockTime(host.away.since)}: ${host.away.reason}`);
  }
  return lines;
}

function replicasTable(hosts: HostView[]): string {
  const rows = hosts.flatMap((host) => host.replicas.map((replica) => [
    host.id, replica.model, replica.resident ? 'yes' : 'no',
    replica.throughput === null ? '-' : `${replica.throughput >= 10 ? replica.throughput.toFixed(0) : replica.throughput.toFixed(2)} jobs/s (${replica.samples})`,
    replica.health + (replica.healthDetail ? `: ${replica.healthDetail.slice(0, 60)}` : ''), breakerText(replica.breaker),
  ]));
  return rows.length === 0 ? 'replicas: none measured yet' : table(['HOST', 'MODEL', 'RESIDENT', 'THROUGHPUT (batches)', 'HEALTH', 'BREAKER'], rows);
}

/**
 * `storage: 1,234 blobs, 2.3 GiB in ./.gpumesh/blobs; finished jobs without results kept 30 days; disk: 41 GiB free of
 * 100 GiB`: what the disk (or the bucket) holds, for how long jobs are kept, and the data folder's free space — `disk
 * LOW: …` with what that stops while it is below its floor.
 */
/**
 * `jobs: waiting 1, queued 3, running 2, succeeded 40`: jobs by status in the order a job passes through them — those
 * waiting for another job's output first, before the queued ones (the per-model QUEUED column counts only queued jobs:
 * a waiting job is in no queue until its sources succeed).
 */
export function jobsLine(jobs: StatusView['jobs']): string {
  const order = (state: string): number => {
    const at = (JOB_STATUSES as readonly string[]).indexOf(state);
    return at < 0 ? JOB_STATUSES.length : at;
  };
  const states = Object.entries(jobs).sort(([a], [b]) => order(a) - order(b));
  return `jobs: ${states.map(([state, count]) => `${state} ${count}`).join(', ') || 'none yet'}`;
}

export function storageLine(storage: StorageView): string {
  const { blobs, jobs, disk } = storage;
  const kept = jobs.retentionDays === 0 ? 'every finished job kept' : `finished jobs without results kept ${jobs.retentionDays} day${jobs.retentionDays === 1 ? '' : 's'}`;
  const line = `storage: ${blobs.count.toLocaleString('en')} blob${blobs.count === 1 ? '' : 's'}, ${formatBytes(blobs.bytes)} in ${blobs.location}; ${kept}`;
  if (!disk || disk.checkedAt === null) return line;
  const free = `${formatBytes(disk.freeBytes)} free of ${formatBytes(disk.totalBytes)}`;
  if (!disk.low) return `${line}; disk: ${free}`;
  return `${line}; disk LOW: ${free}, below the floor of ${formatBytes(disk.minFreeBytes)} (storage.minFreeMB): new uploads, jobs and model adds are refused (STORAGE_FULL) until space is freed`;
}

async function status(options: ClientOptions & { json?: boolean }): Promise<void> {
  const client = clientFrom(options);
  const [current, { hosts }, storage] = await Promise.all([
    client.request<Status>('GET', '/v1/status'), client.request<Hosts>('GET', '/v1/hosts'),
    // An orchestrator older than this command has no storage view: the rest is shown without it.
    client.request<StorageView>('GET', '/v1/storage').catch((error: unknown) => {
      if (error instanceof ApiError && error.status === 404) return null;
      throw error;
    }),
  ]);
  if (options.json) return printJson({ ...current, hosts, ...(storage ? { storage } : {}) });
  const out: string[] = [`mesh at ${client.baseUrl}`, ''];
  out.push(hosts.length === 0 ? 'hosts: none connected' : hostsTable(hosts));
  const capabilities = capabilityLines(hosts);
  if (capabilities.length > 0) out.push('', ...capabilities);
  if (hosts.length > 0) out.push('', replicasTable(hosts));
  out.push('', table(['MODEL', 'QUEUED', 'LIMIT', 'REPLICAS', 'WHERE'], Object.entries(current.queues).map(([model, queue]) => {
    const placed = current.models?.[model];
    if (!placed) return [model, String(queue.depth), String(queue.limit), '-', '-'];
    const ready = placed.replicas.filter((replica) => replica.state === 'ready').length;
    const where = placed.replicas.map((replica) => `${replica.host} (${replica.state}${replica.held ? ', held' : ''})`).join(', ');
    return [
      model, String(queue.depth), String(queue.limit),
      `${ready}/${placed.desired} (min ${placed.min}, max ${placed.max ?? 'any'})`, where || '-',
    ];
  })));
  out.push('', jobsLine(current.jobs));
  if (storage) out.push(storageLine(storage));
  const energy = energyLine(current.energy);
  if (energy) out.push(energy);
  out.push(...doorLines(current.doors));
  process.stdout.write(`${out.join('\n')}\n`);
}

export function statusCommand(): Command {
  return withClientOptions(new Command('status'))
    .description('Show hosts (health, breakers, free slots, devices and memory, resident models), each replica\'s measured throughput and breaker, queue depths, each model\'s replicas (ready/desired, where), jobs, and what the store holds')
    .option('--json', 'print JSON')
    .action((options) => status(options));
}
