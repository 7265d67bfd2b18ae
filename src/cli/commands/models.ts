import { mkdirSync, readdirSync, statSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { Command } from 'commander';
import type { Device, ModelManifest } from '../../protocol/index.js';
import { clientFrom, type ClientOptions } from '../common/settings.js';
import { CliError, parseInteger, parseList, printJson, table } from '../common/output.js';
import { uploadFile } from '../common/upload.js';
import { withClientOptions } from './shared.js';

type Listed = ModelManifest & { policy: { batching: { maxBatchSize: number } } };
interface Family { name: string; route: string; versions: Listed[] }
interface ReplicaChange { host: string; model: string; device: string | null; before: Device[]; after: Device[] }

/** `model.onnx`, or the one ONNX file in a folder. */
function modelFile(path: string): string {
  const full = resolve(path);
  let stats;
  try {
    stats = statSync(full);
  } catch {
    throw new CliError(`${path}: no such file or folder`);
  }
  if (!stats.isDirectory()) return full;
  const onnx = readdirSync(full).filter((name) => name.endsWith('.onnx'));
  if (onnx.length !== 1) throw new CliError(`${path}: a folder must hold exactly one .onnx file (it holds ${onnx.length}); name the file instead`);
  return join(full, onnx[0]!);
}

/** `max=8,preferred=4|8,delay=2` → the batching policy. */
function parseBatching(text: string): Record<string, unknown> {
  const batching: Record<string, unknown> = {};
  for (const part of parseList(text)) {
    const [key, value] = part.split('=');
    if (key === 'max') batching.maxBatchSize = Number(value);
    else if (key === 'delay') batching.maxQueueDelayMs = Number(value);
    else if (key === 'preferred') batching.preferredBatchSizes = (value ?? '').split('|').map(Number);
    else throw new CliError(`--batching takes max=N, preferred=A|B and delay=MS, not "${part}"`);
  }
  return batching;
}

const tensors = (specs: ModelManifest['inputs']): string => (specs ?? []).map((spec) => `${spec.name} ${spec.datatype} [${spec.shape.join(', ')}]`).join('; ') || '-';

/** What a replica change did to its device: `cpu 120 → 184 MB of 8192`. */
function memoryLine(change: ReplicaChange): string {
  const device = change.after.find((entry) => entry.id === change.device) ?? change.after[0];
  const before = change.before.find((entry) => entry.id === device?.id);
  return device ? `${device.id} ${before?.usedMB ?? '?'} → ${device.usedMB} MB of ${device.budgetMB} MB` : 'no device reported';
}

export function modelsCommand(): Command {
  const models = new Command('models').description('The model registry: add your own models, their versions, where they are loaded');

  withClientOptions(models.command('add <file>'))
    .description('Add a model (an ONNX file, or a folder with one) as a new version; its inputs and outputs are read from the file')
    .requiredOption('--name <name>', 'the model\'s name (jobs name it; a version is <name>@<version>)')
    .option('--version <version>', 'the version (default: the next whole number)')
    .option('--engine <engine>', 'the engine that runs it', 'onnx')
    .option('--types <list>', 'the job types it serves', 'tensor')
    .option('--memory <MB>', 'the memory it needs once loaded (default: measured at its first load)', parseInteger('--memory'))
    .option('--batching <policy>', 'max=N, preferred=A|B, delay=MS (default: batches of 8 when its first dimension is variable)')
    .option('--json', 'print JSON')
    .action(async (path: string, options: ClientOptions & { name: string; version?: string; engine: string; types: string; memory?: number; batching?: string; json?: boolean }) => {
      const client = clientFrom(options);
      const file = modelFile(path);
      const showProgress = process.stderr.isTTY && !options.json;
      const stored = await uploadFile(client, file, (sent, total) => {
        if (showProgress) process.stderr.write(`\ruploading ${file}: ${Math.floor((100 * sent) / total)}%`);
      });
      if (showProgress) process.stderr.write('\n');
      const added = await client.request<Listed>('POST', '/v1/models', {
        name: options.name, file: stored.digest, engine: options.engine, types: parseList(options.types),
        ...(options.version ? { version: options.version } : {}), ...(options.memory ? { memoryMB: options.memory } : {}),
        ...(options.batching ? { policy: { batching: parseBatching(options.batching) } } : {}),
      });
      if (options.json) return printJson(added);
      process.stdout.write(`added ${added.name} (${stored.deduplicated ? 'file already stored' : `${stored.bytes} bytes uploaded`}, ${added.digest})\n`
        + `  inputs:  ${tensors(added.inputs)}\n  outputs: ${tensors(added.outputs)}\n`
        + `  types ${added.jobTypes.join(',')}, batches of up to ${added.policy.batching.maxBatchSize}\n`);
    });

  withClientOptions(models.command('ls'))
    .description('Every model: built in, declared in mesh.yaml, or added (with its versions and which one its name runs)')
    .option('--json', 'print JSON')
    .action(async (options: ClientOptions & { json?: boolean }) => {
      const listed = await clientFrom(options).request<{ models: Listed[]; families: { name: string; versions: string[]; route: string }[] }>('GET', '/v1/models');
      if (options.json) return printJson(listed);
      const versioned = new Set(listed.models.filter((model) => model.name.includes('@')).map((model) => model.name));
      const rows = listed.models.filter((model) => !versioned.has(model.name)).map((model) => [model.name, model.version, '-', model.engine, model.jobTypes.join(',')]);
      for (const family of listed.families) {
        const newest = listed.models.find((model) => model.name === `${family.name}@${family.versions.at(-1)}`);
        rows.push([family.name, family.versions.join(','), family.route, newest?.engine ?? '-', newest?.jobTypes.join(',') ?? '-']);
      }
      process.stdout.write(`${table(['MODEL', 'VERSIONS', 'ROUTE', 'ENGINE', 'TYPES'], rows)}\n`);
    });

  withClientOptions(models.command('show <model>'))
    .description('A model\'s manifest (each version\'s, for a model with versions; <name>@<version> for one)')
    .action(async (model: string, options: ClientOptions) => printJson(await clientFrom(options).request('GET', `/v1/models/${encodeURIComponent(model)}`)));

  withClientOptions(models.command('rm <version>'))
    .description('Remove a model version, <name>@<version> (refused while jobs are queued or running on it)')
    .action(async (version: string, options: ClientOptions) => {
      await clientFrom(options).request('DELETE', `/v1/models/${encodeURIComponent(version)}`);
      process.stdout.write(`removed ${version}\n`);
    });

  withClientOptions(models.command('route <model>'))
    .description('Which version a job that names only the model runs: --pin <version>, --split 1=90,2=10 (a canary), or --newest')
    .option('--pin <version>', 'always this version')
    .option('--split <shares>', 'each version\'s share of the jobs, e.g. 1=90,2=10')
    .option('--newest', 'the newest version (the default)')
    .action(async (model: string, options: ClientOptions & { pin?: string; split?: string; newest?: boolean }) => {
      if ([options.pin, options.split, options.newest].filter(Boolean).length !== 1) throw new CliError('give one of --pin, --split or --newest');
      const split = options.split ? Object.fromEntries(parseList(options.split).map((part) => {
        const [version, share] = part.split('=');
        if (!version || !Number.isFinite(Number(share))) throw new CliError(`--split takes version=share pairs, not "${part}"`);
        return [version, Number(share)];
      })) : null;
      const family = await clientFrom(options).request<Family>('PUT', `/v1/models/${encodeURIComponent(model)}/route`, { pinned: options.pin ?? null, split });
      process.stdout.write(`${family.name}: ${family.route}\n`);
    });

  withClientOptions(models.command('load <model>'))
    .description('Make a model resident on a host now (default: the host the mesh would choose); prints its device\'s memory before and after')
    .option('--host <id>', 'the host')
    .action(async (model: string, options: ClientOptions & { host?: string }) => {
      const change = await clientFrom(options).request<ReplicaChange>('POST', `/v1/models/${encodeURIComponent(model)}/load`, options.host ? { host: options.host } : {});
      process.stdout.write(`loaded ${change.model} on ${change.host}: ${memoryLine(change)}\n`);
    });

  withClientOptions(models.command('unload <model>'))
    .description('Let a model go on a host (default: every host that holds it); prints the device\'s memory before and after')
    .option('--host <id>', 'the host')
    .action(async (model: string, options: ClientOptions & { host?: string }) => {
      const { unloaded } = await clientFrom(options).request<{ unloaded: ReplicaChange[] }>('POST', `/v1/models/${encodeURIComponent(model)}/unload`, options.host ? { host: options.host } : {});
      for (const change of unloaded) process.stdout.write(`unloaded ${change.model} on ${change.host}: ${memoryLine(change)}\n`);
    });

  models.command('build')
    .description('Write the built-in ONNX models to files (deterministic: the same digests on every machine)')
    .option('-o, --out <dir>', 'where to write them', 'models')
    .action(async (options: { out: string }) => {
      const { builtinModels } = await import('../../models/index.js');
      const dir = resolve(options.out);
      mkdirSync(dir, { recursive: true });
      const rows = builtinModels().map((model) => {
        const path = join(dir, `${model.name}.onnx`);
        writeFileSync(path, model.bytes);
        return [model.name, model.jobTypes.join(','), `${model.bytes.length}`, model.digest, path];
      });
      process.stdout.write(`${table(['MODEL', 'TYPES', 'BYTES', 'DIGEST', 'FILE'], rows)}\n`);
    });
  return models;
}
