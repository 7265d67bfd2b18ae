import { z } from 'zod';
import { engineDescriptor, ENGINE_NAMES } from '../../protocol/engines/index.js';
import { isNetworkMember } from '../../protocol/engines/onnx.js';
import { externalDataProblem } from '../../protocol/engines/onnx-external-data.js';
import type { ModelFamily, Models, ModelVersion } from '../../protocol/api/index.js';
import { batchesAlongFirstDim, ConfigError, familyOf, MeshError, sha256Digest, TensorSpec, VERSION_SEPARATOR, type ModelManifest } from '../../protocol/index.js';
import type { Clock } from '../../protocol/clock.js';
import type { BlobStore } from '../blobs/blob-store.js';
import { ModelPolicy, policyDefaultsOf, type MeshConfig } from '../config/config.js';
import type { Commits, MeshStore, ModelRecord } from '../store/index.js';
import { routeText, type ModelRegistry, type RegisteredModel } from './models.js';
import { inspectOnnxFile, type OnnxFileFacts } from './onnx-file.js';

const NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$/;
const VERSION = /^[A-Za-z0-9][A-Za-z0-9._-]{0,39}$/;
const MB = 1024 * 1024;
const DIGEST = /^sha256:[0-9a-f]{64}$/;
/** A member of a model of several files: a name an engine looks it up by (`detector`, `dictionary`, `det.onnx`). */
const MEMBER = /^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$/;

/** What `POST /v1/models` (and `gpumesh models add`) takes: a file already stored by digest, and what to make of it. */
export const AddModelBody = z.strictObject({
  name: z.string().regex(NAME, 'a model name: letters, digits, ".", "-" and "_"'),
  /** Default: the next whole number after the model's highest (1 for a new model). */
  version: z.string().regex(VERSION, 'a version: letters, digits, ".", "-" and "_"').optional(),
  /** The model file's digest (`PUT /v1/blobs` or a resumable upload). One of `file` and `files`. */
  file: z.string().regex(DIGEST, 'sha256:<64 hex>').optional(),
  /**
   * A model of several files (OCR's detector, recogniser and dictionary): each member's name → its stored digest.
   * The version's digest is then that of an index listing them (see `bundleIndex`). One of `file` and `files`.
   */
  files: z.record(z.string().regex(MEMBER, 'a file name: letters, digits, ".", "-" and "_"'), z.string().regex(DIGEST, 'sha256:<64 hex>'))
    .refine((files) => Object.keys(files).length >= 1 && Object.keys(files).length <= 16, 'one to 16 files').optional(),
  /** Default onnx. */
  engine: z.string().min(1).max(40).default('onnx'),
  /** The job types it serves. Default [tensor]. */
  types: z.array(z.string().min(1).max(40)).min(1).max(16).default(['tensor']),
  /** Memory it needs once loaded (MB). Default: a guess from the file's size, until the agent measures it at its first load. */
  memoryMB: z.int().min(1).max(10_000_000).optional(),
  /** Batching and replicas (the `models:` policy of mesh.yaml). Default: batches of 8 when every input's first dimension is variable, else 1. */
  policy: ModelPolicy.optional(),
  params: z.record(z.string(), z.union([z.number(), z.string()])).default({}),
  /** The engine's settings. Default for onnx: the generic tensor pipeline. */
  settings: z.record(z.string(), z.unknown()).optional(),
  /** Its inputs and outputs; default (onnx): read from the file. */
  inputs: z.array(TensorSpec).max(64).optional(),
  outputs: z.array(TensorSpec).max(64).optional(),
}).refine((body) => (body.file === undefined) !== (body.files === undefined), { message: 'give the model\'s file or its files, not both', path: ['file'] });
export type AddModelBody = z.input<typeof AddModelBody>;

export interface ModelCatalogDeps {
  store: MeshStore;
  commits: Commits;
  clock: Clock;
  config: MeshConfig;
  registry: ModelRegistry;
  blobs: BlobStore;
  /** Tell the hosts that hold it to let a removed version go. */
  unloadEverywhere(model: string): void;
}

/**
 * The models people add while the mesh runs (`gpumesh models add`, `POST /v1/models`): each version's manifest built
 * from the file it names — its inputs and outputs read from the ONNX file itself — registered as `<model>@<version>`
 * and kept in the store, so they are back after a restart; versions removed only while no job uses them; which
 * version a bare name means (pinned, a traffic split, or the newest).
 */
export class ModelCatalog {
  readonly #deps: ModelCatalogDeps;
  /** Each model's add in progress: adds of one model run one after the other, so a version is chosen and written whole. */
  readonly #adding = new Map<string, Promise<unknown>>();
  /** Each stored version's record (by `<model>@<version>`): a measured memory rewrites it whole. */
  readonly #records = new Map<string, ModelRecord>();

  constructor(deps: ModelCatalogDeps) {
    this.#deps = deps;
  }

  /** At start: the stored models into the registry, and their routes. */
  async restore(): Promise<number> {
    const { store, registry } = this.#deps;
    const stored = await store.models.listModels();
    for (const { model, record } of stored) {
      registry.addVersion(model, record.manifest, record.policy ? policyDefaultsOf(ModelPolicy.parse(record.policy)) : undefined);
      this.#records.set(record.manifest.name, record);
    }
    for (const route of await store.models.listModelRoutes()) {
      // A model mesh.yaml pins keeps its stored route for the day the pin leaves the file.
      const family = registry.family(route.name);
      if (family?.pinnedIn !== null) continue;
      // Only versions still there (one removed while mesh.yaml pinned the model left the stored route as it was).
      const split = Object.fromEntries(Object.entries(route.split ?? {}).filter(([version]) => family.versions.includes(version)));
      registry.setRoute(route.name, {
        pinned: route.pinned !== null && family.versions.includes(route.pinned) ? route.pinned : null,
        split: Object.values(split).some((share) => share > 0) ? split : null,
      });
    }
    return stored.length;
  }

  /**
   * Add a version; resolves with it once stored, then registered. Adds of the same model wait for each other: the
   * version is chosen from what is registered after the awaits of the add before it (two adds without a version get
   * 1 and 2; two of the same version: the second is MODEL_EXISTS), and nothing is registered before the store has it.
   */
  async add(input: AddModelBody): Promise<RegisteredModel> {
    const parsed = AddModelBody.safeParse(input);
    if (!parsed.success) throw new MeshError('VALIDATION_FAILED', { detail: parsed.error.issues.map((issue) => `${issue.path.join('.') || 'body'}: ${issue.message}`).join('; ') });
    const body = parsed.data;
    const before = this.#adding.get(body.name) ?? Promise.resolve();
    const adding = before.catch(() => undefined).then(async () => this.#add(body));
    this.#adding.set(body.name, adding);
    try {
      return await adding;
    } finally {
      if (this.#adding.get(body.name) === adding) this.#adding.delete(body.name);
    }
  }

  async #add(body: z.output<typeof AddModelBody>): Promise<RegisteredModel> {
    const { registry, config, blobs, store, commits, clock } = this.#deps;
    if (registry.get(body.name) && !registry.family(body.name)) {
      throw new MeshError('MODEL_EXISTS', { model: body.name, detail: 'a built-in or mesh.yaml model has that name; choose another' });
    }
    const family = registry.family(body.name);
    const version = body.version ?? nextVersion(family?.versions ?? []);
    if (family?.versions.includes(version)) throw new MeshError('MODEL_EXISTS', { model: `${body.name}${VERSION_SEPARATOR}${version}`, detail: 'that version exists; add another version, or remove it first' });
    const engine = engineDescriptor(body.engine);
    if (!engine) throw new MeshError('VALIDATION_FAILED', { detail: `engine: "${body.engine}" is not one gpumesh knows (${ENGINE_NAMES.join(', ')})` });
    const settings = body.settings ?? (body.engine === 'onnx' ? { pipeline: DEFAULT_ONNX_PIPELINE[body.types[0]!] ?? 'tensors' } : {});
    // What makes a host run, reach or read something of its own is the host's to say (its own config), not the API's.
    const hostOnly = engine.hostSettingsOf(settings);
    if (hostOnly.length > 0) {
      throw new MeshError('HOST_CONFIG_ONLY', {
        model: `${body.name}${VERSION_SEPARATOR}${version}`, keys: hostOnly.map((key) => `settings.${key}`).join(', '),
        detail: `declare the model in the host's own config (mesh.yaml where gpumesh up runs, host.yaml on an agent's host: models.${body.name}.settings) and add it here without ${hostOnly.length > 1 ? 'them' : 'it'}`,
      });
    }
    for (const type of body.types) {
      if (!config.routing[type]) throw new MeshError('VALIDATION_FAILED', { detail: `types: this mesh routes no job type "${type}" (it routes: ${Object.keys(config.routing).join(', ')})` });
    }
    const name = `${body.name}${VERSION_SEPARATOR}${version}`;
    // A model of several files: its index is made here but stored only once every check has passed (below).
    const bundle = body.files ? await this.#bundle(body.files) : null;
    const stored = bundle ?? { digest: body.file!, bytes: await this.#sizeOf(body.file!), files: undefined, index: null };
    // A single ONNX file declares its inputs and outputs; a model of several files has none of its own (each member has).
    // Read by ranges, never whole: a model may be gigabytes.
    const single = body.engine === 'onnx' && !body.files ? await this.#inspect(stored.digest, stored.bytes, name) : null;
    const signature = single ?? { inputs: [], outputs: [] };
    const inputs = body.inputs ?? signature.inputs;
    const outputs = body.outputs ?? signature.outputs;
    const checked = (engine.meshSettings ?? engine.settings).safeParse(settings);
    if (!checked.success) throw new MeshError('VALIDATION_FAILED', { detail: checked.error.issues.map((issue) => `settings.${issue.path.join('.')}: ${issue.message}`).join('; ') });
    const wanted = engine.filesFor?.(settings) ?? [];
    const lacking = wanted.filter((member) => !stored.files?.[member]);
    if (lacking.length > 0) {
      throw new MeshError('VALIDATION_FAILED', { detail: `files: a ${String(settings.pipeline ?? body.engine)} model holds files named ${wanted.join(', ')}; ${stored.files ? `it lacks ${lacking.join(', ')} (it has ${Object.keys(stored.files).join(', ')})` : 'it was given one file'}` });
    }
    if (body.engine === 'onnx') await this.#checkExternalData(name, stored.files ?? null, single, String(settings.pipeline));
    const manifest: ModelManifest = {
      name, version, engine: body.engine, digest: stored.digest, file: true, bytes: stored.bytes, ...(stored.files ? { files: stored.files } : {}),
      memoryMB: body.memoryMB ?? Math.max(64, Math.ceil((2 * stored.bytes) / MB)), memoryFrom: body.memoryMB === undefined ? 'estimate' : 'given',
      jobTypes: body.types, params: body.params, settings,
      ...(inputs.length ? { inputs } : {}), ...(outputs.length ? { outputs } : {}),
    };
    const policy = body.policy ?? (batchesAlongFirstDim(inputs) || FUSING_TYPES.has(body.types[0]!) ? { batching: { maxBatchSize: 8, preferredBatchSizes: [8], maxQueueDelayMs: 2 } } : null);
    const defaults = policy ? policyDefaultsOf(ModelPolicy.parse(policy)) : undefined;
    // Everything that can refuse runs before any write — the index blob, the store — and the registry takes the
    // version only once the store has it: a refused add leaves nothing, and jobs never run a version the API did not
    // answer 201 for.
    try {
      registry.check(manifest);
    } catch (error) {
      if (error instanceof ConfigError) throw new MeshError('VALIDATION_FAILED', { detail: error.message });
      throw error;
    }
    // Before the version's row, so a stored version always finds its index. The insert below fails only when the
    // store does, or another orchestrator sharing it holds the version; the index is then kept, not deleted, since
    // that version (or another of the same members) may name the same bytes.
    if (stored.index) await blobs.putBytes(stored.index, stored.digest);
    const record: ModelRecord = { manifest, policy, createdAt: clock.now() };
    try {
      commits.write(() => store.models.insertModel(body.name, record));
    } catch (error) {
      // Only another orchestrator sharing the store (or a row this one forgot) can hold the version by now.
      if (/unique|duplicate/i.test((error as Error).message)) throw new MeshError('MODEL_EXISTS', { model: name, detail: 'the store holds that version already; add another version' });
      throw error;
    }
    await commits.durable();
    registry.addVersion(body.name, manifest, defaults);
    this.#records.set(name, record);
    return registry.get(name)!;
  }

  /**
   * An agent measured a version's memory as it loaded it: a version added without `memoryMB` takes the first measure
   * in place of its size-based guess — in the registry, so routing, residency and `models show` use it, and in the
   * store, so it outlasts a restart. A given or already measured figure stays.
   */
  async measured(name: string, memoryMB: number): Promise<void> {
    const { registry, store, commits } = this.#deps;
    const record = this.#records.get(name);
    if (!record || record.manifest.memoryFrom !== 'estimate' || !(memoryMB > 0)) return;
    const model = familyOf(name);
    const updated: ModelRecord = { ...record, manifest: { ...record.manifest, memoryMB: Math.ceil(memoryMB), memoryFrom: 'measured' } };
    this.#records.set(name, updated);
    commits.write(() => {
      store.models.deleteModel(model, updated.manifest.version);
      store.models.insertModel(model, updated);
    });
    registry.addVersion(model, updated.manifest, updated.policy ? policyDefaultsOf(ModelPolicy.parse(updated.policy)) : undefined);
    await commits.durable();
  }

  /**
   * What the model's networks make onnxruntime open by themselves (external data) must be a file of the model's own
   * file set — never a path on the host, which the agent would read from its engine's folder (the signing key, a
   * grant, anything relative to it). Refused here, before anything is stored, and again by the agent at load.
   */
  async #checkExternalData(model: string, files: Record<string, { digest: string; bytes: number }> | null, single: OnnxFileFacts | null, pipeline: string): Promise<void> {
    const networks = files
      ? await Promise.all(Object.entries(files).filter(([member]) => isNetworkMember(member, pipeline))
        .map(async ([member, { digest, bytes }]) => ({ member, facts: await this.#inspect(digest, bytes, model) })))
      : [{ member: null, facts: single! }];
    for (const { member, facts } of networks) {
      const others = new Set(Object.keys(files ?? {}).filter((name) => name !== member));
      const problem = externalDataProblem(facts.external, others, member ?? undefined);
      if (problem) throw new MeshError('INVALID_INPUT', { model, detail: `${member ? `${member}: ` : ''}${problem}` });
    }
  }

  /** A stored ONNX file's signature and external data, read by ranges (inspectOnnxFile). */
  #inspect(digest: string, bytes: number, model: string): Promise<OnnxFileFacts> {
    return inspectOnnxFile(async (start, end) => this.#deps.blobs.read(digest, { start, end }), bytes, model);
  }

  /** A stored blob's size, or NOT_FOUND telling how to store it. */
  async #sizeOf(digest: string): Promise<number> {
    const opened = await this.#deps.blobs.open(digest);
    if (!opened) throw missingBlob(digest);
    const { size } = opened;
    await opened.close();
    return size;
  }

  /**
   * The members of a model of several files, each checked to be stored, and their index — not stored here: the
   * version's digest, so that a changed member is another version and the agent can tell it has them all.
   */
  async #bundle(files: Record<string, string>): Promise<{ digest: string; bytes: number; files: Record<string, { digest: string; bytes: number }>; index: Uint8Array }> {
    const members: Record<string, { digest: string; bytes: number }> = {};
    for (const name of Object.keys(files).sort()) members[name] = { digest: files[name]!, bytes: await this.#sizeOf(files[name]!) };
    const index = bundleIndex(members);
    return { digest: sha256Digest(index), bytes: Object.values(members).reduce((sum, member) => sum + member.bytes, 0), files: members, index };
  }

  /** Remove a version; refused (409) while jobs are queued or running on it. */
  async remove(model: string, version: string): Promise<void> {
    const { registry, store, commits } = this.#deps;
    const name = `${model}${VERSION_SEPARATOR}${version}`;
    if (!registry.family(model)?.versions.includes(version)) {
      throw new MeshError('NOT_FOUND', { what: registry.get(model) ? `Model ${model} (a built-in or mesh.yaml model, not removable)` : `Model ${name}` });
    }
    const family = registry.family(model)!;
    if (family.pinnedIn === 'mesh.yaml' && family.pinned === version) {
      throw new MeshError('MODEL_PINNED', { model, version, detail: 'remove the pin from mesh.yaml and restart, then remove the version' });
    }
    const busy = (await store.jobs.jobsInStates(['queued', 'dispatched', 'running'])).filter((job) => job.model === name).length;
    if (busy > 0) throw new MeshError('MODEL_IN_USE', { model: name, jobs: busy });
    registry.removeVersion(model, version);
    this.#records.delete(name);
    const left = registry.family(model);
    commits.write(() => {
      store.models.deleteModel(model, version);
      // A mesh.yaml pin is the file's, not the store's: the stored route stays as the API left it.
      if (left && left.pinnedIn !== 'mesh.yaml') store.models.setModelRoute({ name: model, pinned: left.pinned, split: left.split });
      else if (!left) store.models.deleteModelRoute(model);
    });
    await commits.durable();
    this.#deps.unloadEverywhere(name);
  }

  /** Which version the model's bare name runs: `pinned`, or a traffic split by share; both null: the newest. */
  async route(model: string, route: { pinned: string | null; split: Record<string, number> | null }): Promise<ModelFamily> {
    this.#deps.registry.setRoute(model, route);
    this.#deps.commits.write(() => this.#deps.store.models.setModelRoute({ name: model, ...route }));
    await this.#deps.commits.durable();
    return this.view(model);
  }

  /** Every model version in the registry, and the models with versions with the version each name runs (`GET /v1/models`). */
  list(): Models {
    const { registry } = this.#deps;
    return {
      models: registry.all().map(versionView),
      families: registry.families().map((family) => ({ name: family.name, versions: family.versions, pinned: family.pinned, split: family.split, route: routeText(family) })),
    };
  }

  /** A model with versions, its route and every version (`GET /v1/models/:name`). */
  view(model: string): ModelFamily {
    const { registry } = this.#deps;
    const family = registry.family(model);
    if (!family) throw new MeshError('NOT_FOUND', { what: `Model ${model}` });
    return {
      name: model, pinned: family.pinned, split: family.split, pinnedIn: family.pinnedIn,
      route: routeText(family),
      versions: family.versions.map((version) => versionView(registry.get(`${model}${VERSION_SEPARATOR}${version}`)!)),
    };
  }
}

/**
 * One version as the models API shows it: the model's name and the version apart (the registry and the link name it
 * `<model>@<version>`), its job types as `types`, and the policy in effect.
 */
export function versionView({ manifest, policy }: RegisteredModel): ModelVersion {
  const { name, jobTypes, ...rest } = manifest;
  return { name: familyOf(name), ...rest, types: jobTypes, policy: { ...policy } };
}

const missingBlob = (digest: string): MeshError => new MeshError('NOT_FOUND', { what: `Blob ${digest} (store the file first: PUT /v1/blobs or a resumable upload)` });

/** The ONNX pipeline a model added for a job type gets when its settings name none (else `tensors`). */
const DEFAULT_ONNX_PIPELINE: Readonly<Record<string, string>> = { ocr: 'ocr' };
/** Job types whose models batch by default though they declare no batch dimension (their pipeline pads pictures to one). */
const FUSING_TYPES: ReadonlySet<string> = new Set(['ocr']);

/**
 * The index of a model of several files: `{"files": {"<name>": {"digest", "bytes"}, …}}` with the names sorted and no
 * spaces, so the same members always give the same bytes, and so the same digest.
 */
export function bundleIndex(members: Readonly<Record<string, { digest: string; bytes: number }>>): Uint8Array {
  const sorted = Object.fromEntries(Object.keys(members).sort().map((name) => [name, { digest: members[name]!.digest, bytes: members[name]!.bytes }]));
  return new TextEncoder().encode(JSON.stringify({ files: sorted }));
}

/** The next whole-number version after the highest whole-number one (1 for none). */
function nextVersion(versions: readonly string[]): string {
  const numbers = versions.map(Number).filter((value) => Number.isSafeInteger(value) && value >= 0);
  return String(numbers.length ? Math.max(...numbers) + 1 : 1);
}
