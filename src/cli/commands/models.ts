import { mkdirSync, readdirSync, statSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { Command } from 'commander';
import type { LoadAnswer, ModelFamily, Models, ModelVersion, ReplicaChange, UnloadAnswer } from '../../protocol/api/index.js';
import { VERSION_SEPARATOR } from '../../protocol/index.js';
import { clientFrom, type ClientOptions } from '../common/settings.js';
import { CliError, parseInteger, parseList, printJson, table } from '../common/output.js';
import { uploadFile } from '../common/upload.js';
import { withClientOptions } from './shared.js';


/** A load or unload answers once the agent did it: the orchestrator waits up to 10 minutes, and so does the CLI. */
const MODEL_CHANGE_WITHIN_MS = 10 * 60_000 + 30_000;

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

/**
 * `detector=det.onnx,recognizer=rec.onnx,dictionary=keys.txt` → each member's name and file, a relative file taken
 * in `base` (the folder `models add` was given, else the working folder).
 */
function memberFiles(text: string, base: string): [string, string][] {
  return parseList(text).map((part) => {
    const at = part.indexOf('=');
    if (at <= 0 || at === part.length - 1) throw new CliError(`--files takes name=file pairs, not "${part}"`);
    const file = resolve(base, part.slice(at + 1));
    try {
      if (!statSync(file).isFile()) throw new CliError(`--files: ${part.slice(at + 1)} is not a file`);
    } catch (error) {
      if (error instanceof CliError) throw error;
      throw new CliError(`--files: ${file}: no such file`);
    }
    return [part.slice(0, at), file];
  });
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

const tensors = (specs: ModelVersion['inputs']): string => (specs ?? []).map((spec) => `${spec.name} ${spec.datatype} [${spec.shape.join(', ')}]`).join('; ') || '-';

/** What a replica change did to its device: `cpu 120 → 184 MB of 8192`. */
function memoryLine(change: ReplicaChange): string {
  const device = change.after.find((entry) => entry.id === change.device) ?? change.after[0];
  const before = change.before.find((entry) => entry.id === device?.id);
  return device ? `${device.id} ${before?.usedMB ?? '?'} → ${device.usedMB} MB of ${device.budgetMB} MB` : 'no device reported';
}

export function modelsCommand(): Command {
  const models = new Command('models').description('The model registry: add your own models, their versions, where they are loaded');

  withClientOptions(models.command('add [path]'))
    .description('Add a model (an ONNX file, a folder with one, or with --files a model of several files) as a new version; the inputs and outputs of one ONNX file are read from it')
    .requiredOption('--name <name>', 'the model\'s name (jobs name it; a version is <name>@<version>)')
    .option('--version <version>', 'the version (default: the next whole number)')
    .option('--engine <engine>', 'the engine that runs it', 'onnx')
    .option('--types <list>', 'the job types it serves', 'tensor')
    .option('--files <list>', 'a model of several files: name=file pairs, e.g. detector=det.onnx,recognizer=rec.onnx,dictionary=keys.txt (files relative to [path])')
    .option('--settings <json>', 'the engine\'s settings, as JSON (default for onnx: the pipeline of the first job type)')
    .option('--memory <MB>', 'the memory it needs once loaded (default: measured at its first load)', parseInteger('--memory'))
    .option('--batching <policy>', 'max=N, preferred=A|B, delay=MS (default: batches of 8 when its first dimension is variable)')
    .option('--json', 'print JSON')
    .action(async (path: string | undefined, options: ClientOptions & { name: string; version?: string; engine: string; types: string; files?: string; settings?: string; memory?: number; batching?: string; json?: boolean }) => {
      const client = clientFrom(options);
      if (!path && !options.files) throw new CliError('give the model\'s file (or a folder with one), or its files with --files');
      let settings: unknown;
      if (options.settings !== undefined) {
        try {
          settings = JSON.parse(options.settings);
        } catch {
          throw new CliError('--settings takes a JSON object');
        }
      }
      const showProgress = process.stderr.isTTY && !options.json;
      const upload = async (file: string) => {
        const stored = await uploadFile(client, file, (sent, total) => {
          if (showProgress) process.stderr.write(`\ruploading ${file}: ${Math.floor((100 * sent) / total)}%`);
        });
        if (showProgress) process.stderr.write('\n');
        return stored;
      };
      // Each file is uploaded on its own (resumable, and not sent again if the mesh has it); the version names them.
      const members = options.files ? memberFiles(options.files, path ? resolve(path) : process.cwd()) : null;
      const uploads = members ? await Promise.all(members.map(async ([, file]) => upload(file))) : [await upload(modelFile(path!))];
      const added = await client.request<ModelVersion>('POST', '/v1/models', {
        name: options.name, engine: options.engine, types: parseList(options.types),
        ...(members ? { files: Object.fromEntries(members.map(([name], index) => [name, uploads[index]!.digest])) } : { file: uploads[0]!.digest }),
        ...(settings !== undefined ? { settings } : {}),
        ...(options.version ? { version: options.version } : {}), ...(options.memory ? { memoryMB: options.memory } : {}),
        ...(options.batching ? { policy: { batching: parseBatching(options.batching) } } : {}),
      });
      if (options.json) return printJson(added);
      const sent = uploads.filter((stored) => !stored.deduplicated).reduce((sum, stored) => sum + stored.bytes, 0);
      const what = uploads.every((stored) => stored.deduplicated) ? `${uploads.length > 1 ? 'files' : 'file'} already stored` : `${sent} bytes uploaded`;
      process.stdout.write(`added ${added.name}${VERSION_SEPARATOR}${added.version} (${what}, ${added.digest})\n`
        + (added.files ? `  files:   ${Object.entries(added.files).map(([name, member]) => `${name} ${member.bytes} bytes`).join('; ')}\n` : '')
        + `  inputs:  ${tensors(added.inputs)}\n  outputs: ${tensors(added.outputs)}\n`
        + `  types ${added.types.join(',')}, batches of up to ${(added.policy as { batching: { maxBatchSize: number } }).batching.maxBatchSize}\n`);
    });

  withClientOptions(models.command('ls'))
    .description('Every model: built in, declared in mesh.yaml, or added (with its versions and which one its name runs)')
    .option('--json', 'print JSON')
    .action(async (options: ClientOptions & { json?: boolean }) => {
      const listed = await clientFrom(options).request<Models>('GET', '/v1/models');
      if (options.json) return printJson(listed);
      const versioned = new Set(listed.families.map((family) => family.name));
      const rows = listed.models.filter((model) => !versioned.has(model.name)).map((model) => [model.name, model.version, '-', model.engine, model.types.join(',')]);
      for (const family of listed.families) {
        const newest = listed.models.find((model) => model.name === family.name && model.version === family.versions.at(-1));
        rows.push([family.name, family.versions.join(','), family.route, newest?.engine ?? '-', newest?.types.join(',') ?? '-']);
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
      const family = await clientFrom(options).request<ModelFamily>('PUT', `/v1/models/${encodeURIComponent(model)}/route`, { pinned: options.pin ?? null, split });
      process.stdout.write(`${family.name}: ${family.route}\n`);
    });

  withClientOptions(models.command('load <model>'))
    .description('Make a model resident now: on as many hosts as its minReplicas (at least one; hosts that hold it count, then those the mesh would choose), or --replicas, or --host; prints each host\'s device memory before and after, and how many of how many when fewer hosts can take it')
    .option('--host <id>', 'this host only')
    .option('--replicas <n>', 'on this many hosts (default: max(1, minReplicas); capped by the model\'s maxReplicas)', parseInteger('--replicas'))
    .action(async (model: string, options: ClientOptions & { host?: string; replicas?: number }) => {
      if (options.host !== undefined && options.replicas !== undefined) throw new CliError('give --host or --replicas, not both');
      const body = options.host !== undefined ? { host: options.host } : options.replicas !== undefined ? { replicas: options.replicas } : {};
      const answer = await clientFrom(options).request<LoadAnswer>('POST', `/v1/models/${encodeURIComponent(model)}/load`, body, { answerWithinMs: MODEL_CHANGE_WITHIN_MS });
      for (const change of answer.loaded) process.stdout.write(`loaded ${change.model} on ${change.host}: ${memoryLine(change)}\n`);
      if (answer.note) process.stdout.write(`${answer.note}\n`);
    });

  withClientOptions(models.command('unload <model>'))
    .description('Let a model go on a host (default: every host that holds it); prints the device\'s memory before and after')
    .option('--host <id>', 'the host')
    .action(async (model: string, options: ClientOptions & { host?: string }) => {
      const { unloaded } = await clientFrom(options).request<UnloadAnswer>('POST', `/v1/models/${encodeURIComponent(model)}/unload`, options.host ? { host: options.host } : {}, { answerWithinMs: MODEL_CHANGE_WITHIN_MS });
      for (const change of unloaded) process.stdout.write(`unloaded ${change.model} on ${change.host}: ${memoryLine(change)}\n`);
    });

  models.command('build')
    .description('Write the built-in ONNX models to files (deterministic: the same digests on every machine)')
    .option('-o, --out <dir>', 'where to write them', 'models')
    .action(async (options: { out: string }) => {
      const { builtinModels } = await import('../../orchestrator/index.js');
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
