import { join } from 'node:path';
import { ConfigError, familyOf, MeshError, VERSION_SEPARATOR, type ModelManifest, type TensorSpec } from '../../protocol/index.js';
import { builtinModels, type BuiltinModel } from '../../builtin-models/index.js';
import { policyFor, type MeshConfig, type ModelPolicyDefaults, type ResolvedModelPolicy } from '../config/config.js';
import type { BlobStore } from '../blobs/blob-store.js';
import { definitionDigest, modelDefinitions, type ModelDefinition } from '../config/declared-models.js';
import { ModelFiles } from './model-files.js';
import { jobInputsFor, jobInputsForEngine, type JobInputs } from '../job-inputs/job-inputs.js';
import { engineDescriptor } from '../../protocol/engines/index.js';

export type RecordBlob = (digest: string, bytes: number, mediaType: string) => void;

export interface RegisteredModel {
  manifest: ModelManifest;
  policy: ResolvedModelPolicy;
  /** Its job type's input handling: defaults, batch compatibility, cost, probe input (job-inputs/). */
  jobInputs: JobInputs;
  /**
   * The name hosts declare it by when its engine runs only where a host's own config declares the model (a command, a
   * server: EngineDescriptor.hostDeclared): its family's name. Null: any host with the engine may run it.
   */
  declaredAs?: string | null;
}


/**
 * A model added at run time, with its versions (each registered as `<name>@<version>`, added in order) and the route
 * in effect for its bare name: `pinned`, else a traffic `split` by share, else the newest. `pinnedIn` says where a pin
 * comes from: mesh.yaml's `models.<name>.version` (then the API may not change the route: the file is the whole truth,
 * and the route stored through the API waits in the store until the pin leaves the file) or the API.
 */
export interface ModelFamily {
  name: string;
  versions: string[];
  pinned: string | null;
  split: Record<string, number> | null;
  pinnedIn: 'mesh.yaml' | 'api' | null;
}

/** Which version a model's bare name runs, in words: `pinned to 1 (mesh.yaml)`, `split 1: 90, 2: 10`, `newest (2)`. */
export function routeText(family: ModelFamily): string {
  if (family.pinned) return `pinned to ${family.pinned}${family.pinnedIn === 'mesh.yaml' ? ' (mesh.yaml)' : ''}`;
  if (family.split) return `split ${Object.entries(family.split).map(([version, share]) => `${version}: ${share}`).join(', ')}`;
  return `newest (${family.versions.at(-1)})`;
}

/**
 * The one answer to "which version does this bare name mean", used by jobs, OIP, `models load` and what `models ls`
 * shows. With `random`, a draw by the split's shares (each job, each OIP infer); without, the version the split sends
 * most to, the newer on a tie (what metadata and `models load` describe: a canary is the smaller share).
 */
export function versionOf(family: ModelFamily, random?: () => number): string {
  if (family.pinned !== null && family.versions.includes(family.pinned)) return family.pinned;
  const shares = Object.entries(family.split ?? {}).filter(([version, share]) => share > 0 && family.versions.includes(version));
  if (shares.length > 0 && random) {
    let draw = random() * shares.reduce((sum, [, share]) => sum + share, 0);
    for (const [version, share] of shares) {
      if ((draw -= share) < 0) return version;
    }
  }
  if (shares.length > 0) {
    const order = (version: string) => family.versions.indexOf(version);
    return shares.reduce((best, next) => (next[1] > best[1] || (next[1] === best[1] && order(next[0]) > order(best[0])) ? next : best))[0];
  }
  return family.versions.at(-1)!;
}

/** How the ONNX engine feeds each kind of built-in model (its `settings.pipeline`). */
const ONNX_PIPELINE_OF = { generator: 'cppn-image', video: 'cppn-video', tensor: 'tensor', 'named-tensors': 'tensors' } as const;

/** A built-in model's tensor as a manifest names it (a symbolic dimension is −1). */
const specOf = (tensor: BuiltinModel['inputs'][number]): TensorSpec => ({
  name: tensor.name, datatype: ({ float32: 'FP32', uint8: 'UINT8', int32: 'INT32' } as const)[tensor.dtype], shape: tensor.shape.map((dim) => (typeof dim === 'number' ? dim : -1)),
});

/** Batching defaults of the built-in models, tuned on a 2-core CPU (see bench/RESULTS.md). */
const BUILTIN_POLICIES: Record<string, ModelPolicyDefaults> = {
  gen: { batching: { maxBatchSize: 4, preferredBatchSizes: [4], maxQueueDelayMs: 0 } },
  // A clip is dozens of images already (the engine runs frames in chunks); clips run one at a time.
  'gen-video': { batching: { maxBatchSize: 1, preferredBatchSizes: [1], maxQueueDelayMs: 0 } },
  mlp: { batching: { maxBatchSize: 32, preferredBatchSizes: [8, 16, 32], maxQueueDelayMs: 2 } },
  // Requests of Triton clients stack along the first dimension; one alone leaves at once (work-conserving batching).
  simple: { batching: { maxBatchSize: 8, preferredBatchSizes: [8], maxQueueDelayMs: 0 } },
};

/**
 * The model registry: manifests by name, their files in the blob store. The
 * built-in models are built in memory (deterministically, so their digests
 * never change) and stored on first start; models declared in mesh.yaml have
 * their files imported at start (or have none).
 */
export class ModelRegistry {
  readonly #models = new Map<string, RegisteredModel>();
  readonly #families = new Map<string, ModelFamily>();
  readonly #config: MeshConfig;
  readonly #random: () => number;

  constructor(config: MeshConfig, random: () => number = Math.random) {
    this.#config = config;
    this.#random = random;
  }

  async addBuiltins(blobs: BlobStore, recordBlob: RecordBlob): Promise<void> {
    for (const builtin of builtinModels()) {
      const stored = await blobs.putBytes(builtin.bytes, builtin.digest);
      recordBlob(stored.digest, stored.bytes, 'application/onnx');
      const params: Record<string, number | string> = {};
      if (builtin.defaultSteps !== undefined) params.defaultSteps = builtin.defaultSteps;
      for (const spec of builtin.inputs) if (spec.name === 'x') params.inputDim = Number(spec.shape[1]);
      for (const spec of builtin.outputs) if (spec.name === 'y') params.outputDim = Number(spec.shape[1]);
      this.add({
        name: builtin.name, version: builtin.version, engine: builtin.engine, digest: stored.digest, file: true, bytes: stored.bytes,
        memoryMB: builtin.memoryMB, jobTypes: builtin.jobTypes, params,
        // How the ONNX engine feeds it is the engine's setting; the job type's input handling is the orchestrator's.
        settings: { pipeline: ONNX_PIPELINE_OF[builtin.kind], ...(builtin.threads !== undefined ? { threads: builtin.threads } : {}), ...(builtin.inAgentProcess ? { process: 'agent' } : {}) },
        // Only a model whose jobs send named tensors declares them: the others' inputs are their job type's own.
        ...(builtin.kind === 'named-tensors' ? { inputs: builtin.inputs.map(specOf), outputs: builtin.outputs.map(specOf) } : {}),
      });
    }
  }

  /**
   * The models declared in mesh.yaml (`models:` entries with an `engine`, checked when the config was read):
   * each file imported into the blob store (a changed or unreadable file is a ConfigError naming it), a model
   * without a file identified by the digest of its definition. Returns the definitions added.
   */
  async addDeclared(blobs: BlobStore, recordBlob: RecordBlob, files = new ModelFiles(blobs, join(this.#config.data, 'blobs'))): Promise<ModelDefinition[]> {
    const definitions = modelDefinitions(this.#config.models);
    for (const definition of definitions) {
      if (this.#models.has(definition.name)) {
        throw new ConfigError(`invalid mesh config:\n  models.${definition.name}.engine: "${definition.name}" is a built-in model; a declared model needs a name of its own`);
      }
      let stored: { digest: string; bytes: number } | null = null;
      if (definition.file !== null) {
        try {
          stored = await files.import(definition.file, definition.sha256);
        } catch (error) {
          const why = error instanceof MeshError && error.code === 'DIGEST_MISMATCH' ? `its bytes hash to ${String(error.params.actual)}, not ${definition.sha256}` : (error as Error).message;
          throw new ConfigError(`invalid mesh config:\n  models.${definition.name}.file: cannot import ${definition.file}: ${why}`);
        }
        recordBlob(stored.digest, stored.bytes, 'application/octet-stream');
      }
      this.add({
        name: definition.name, version: definition.version, engine: definition.engine,
        digest: stored?.digest ?? definitionDigest(definition), file: stored !== null, bytes: stored?.bytes ?? 0,
        memoryMB: definition.memoryMB, jobTypes: definition.types, params: definition.params, settings: definition.settings,
      });
    }
    return definitions;
  }

  /**
   * Register a manifest; its job types' input handling must exist (the first type's serves them all). `defaults`: the
   * policy it was added with (mesh.yaml's entry for its model still wins).
   */
  add(manifest: ModelManifest, defaults?: ModelPolicyDefaults): void {
    this.#models.set(manifest.name, this.#entry(manifest, defaults));
  }

  /** Throws what `add` would throw for the manifest, registering nothing (the catalog checks before it stores). */
  check(manifest: ModelManifest): void {
    this.#entry(manifest);
  }

  #entry(manifest: ModelManifest, defaults?: ModelPolicyDefaults): RegisteredModel {
    const inputs = jobInputsFor(manifest.jobTypes[0] ?? '');
    if (!inputs) throw new ConfigError(`model "${manifest.name}": no input handling for job type "${manifest.jobTypes[0] ?? '(none)'}"`);
    return {
      manifest,
      policy: policyFor(this.#config, familyOf(manifest.name), defaults ?? BUILTIN_POLICIES[manifest.name]),
      // An engine this orchestrator does not know (one only some agents run) has no markup it could refuse.
      jobInputs: jobInputsForEngine(inputs, engineDescriptor(manifest.engine)),
      declaredAs: engineDescriptor(manifest.engine)?.hostDeclared ? familyOf(manifest.name) : null,
    };
  }

  /**
   * A version of a model added at run time: registered as `<model>@<version>` (its manifest's name), the newest of its
   * model unless another is pinned.
   */
  addVersion(model: string, manifest: ModelManifest, defaults?: ModelPolicyDefaults): void {
    // An invariant: the catalog names every version it adds this way.
    if (manifest.name !== `${model}${VERSION_SEPARATOR}${manifest.version}`) throw new Error(`a version's manifest is named ${model}@${manifest.version}, not ${manifest.name}`);
    this.add(manifest, defaults);
    let family = this.#families.get(model);
    if (!family) {
      const configPin = this.configPin(model);
      family = { name: model, versions: [], pinned: configPin, split: null, pinnedIn: configPin === null ? null : 'mesh.yaml' };
      this.#families.set(model, family);
    }
    if (!family.versions.includes(manifest.version)) family.versions.push(manifest.version);
  }

  /** Forget a version added at run time (its model goes too with its last version). */
  removeVersion(model: string, version: string): void {
    this.#models.delete(`${model}${VERSION_SEPARATOR}${version}`);
    const family = this.#families.get(model);
    if (!family) return;
    family.versions = family.versions.filter((known) => known !== version);
    // The catalog refuses to remove a version mesh.yaml pins, so only an API pin can go with its version.
    if (family.pinned === version) {
      family.pinned = null;
      family.pinnedIn = null;
    }
    if (family.split) delete family.split[version];
    if (family.versions.length === 0) this.#families.delete(model);
  }

  /**
   * Which version the model's bare name means: pinned, or a split by share (both null: the newest). Refused (409
   * MODEL_PINNED) while mesh.yaml pins the model: the file decides, and a route that silently did nothing would lie.
   */
  setRoute(model: string, route: { pinned: string | null; split: Record<string, number> | null }): void {
    const family = this.#families.get(model);
    if (!family) throw new MeshError('NOT_FOUND', { what: `Model ${model}` });
    if (family.pinnedIn === 'mesh.yaml') {
      throw new MeshError('MODEL_PINNED', { model, version: family.pinned!, detail: 'remove models.' + model + '.version from mesh.yaml and restart to route it through the API' });
    }
    for (const version of [route.pinned, ...Object.keys(route.split ?? {})]) {
      if (version !== null && !family.versions.includes(version)) {
        throw new MeshError('VALIDATION_FAILED', { detail: `model ${model} has no version "${version}" (it has: ${family.versions.join(', ')})` });
      }
    }
    if (route.split && !Object.values(route.split).some((share) => share > 0)) throw new MeshError('VALIDATION_FAILED', { detail: 'a split needs a positive share for some version' });
    family.pinned = route.pinned;
    family.pinnedIn = route.pinned === null ? null : 'api';
    family.split = route.split;
  }

  /** The version mesh.yaml pins a model added at run time to (`models.<name>.version`), or null. */
  configPin(model: string): string | null {
    return (this.#config.models[model]?.version as string | undefined) ?? null;
  }

  family(model: string): ModelFamily | undefined {
    return this.#families.get(model);
  }

  families(): ModelFamily[] {
    return [...this.#families.values()];
  }

  /** Every `models:` entry of the config must name a model the registry has (a policy for a typo would otherwise be ignored). */
  checkPolicies(): void {
    const unknown = Object.keys(this.#config.models).filter((name) => !this.#models.has(name) && !this.#families.has(name));
    if (unknown.length > 0) {
      const known = [...this.#models.keys()].join(', ');
      throw new ConfigError(`invalid mesh config:\n${unknown.map((name) => `  models.${name}: no model "${name}" in the registry (it has: ${known})`).join('\n')}`);
    }
    // A pin naming no version would be ignored in silence (the catalog keeps a pinned version from being removed).
    const unpinnable = this.families().filter((family) => family.pinnedIn === 'mesh.yaml' && !family.versions.includes(family.pinned!));
    if (unpinnable.length > 0) {
      throw new ConfigError(`invalid mesh config:\n${unpinnable.map((family) => `  models.${family.name}.version: model ${family.name} has no version "${family.pinned}" (it has: ${family.versions.join(', ')})`).join('\n')}`);
    }
  }

  get(name: string): RegisteredModel | undefined {
    return this.#models.get(name);
  }

  all(): RegisteredModel[] {
    return [...this.#models.values()];
  }

  /**
   * Resolve the model a job runs on: the named one (a version by `<model>@<version>`; a model with versions by its
   * route: pinned, split or newest), or the config's default for its type.
   */
  resolve(jobType: string, name: string | undefined): RegisteredModel {
    const requested = name ?? this.#config.defaultModels[jobType];
    // Listed only for the error: every job resolves its model.
    const known = (): string => [...new Set([...this.#families.keys(), ...this.#models.keys()])].join(', ');
    if (!requested) throw new MeshError('UNKNOWN_MODEL', { model: '(none)', known: known() });
    const model = this.served(requested);
    const modelName = model?.manifest.name ?? requested;
    if (!model) throw new MeshError('UNKNOWN_MODEL', { model: modelName, known: known() });
    if (!model.manifest.jobTypes.includes(jobType)) throw new MeshError('MODEL_TYPE_MISMATCH', { model: modelName, type: jobType });
    return model;
  }

  /**
   * The model a name runs on now: a version by `<model>@<version>`, a model with versions by its route (a draw of its
   * split: call once per job), any other model by its name; undefined when there is none. OIP infer uses it as jobs do.
   */
  served(name: string): RegisteredModel | undefined {
    const family = this.#families.get(name);
    return this.#models.get(family ? `${name}${VERSION_SEPARATOR}${versionOf(family, this.#random)}` : name);
  }

  /**
   * The model a name describes, without a draw: a model with versions by its pin, else the version its split sends
   * most to, else its newest (OIP metadata, `models load`). Undefined when there is none.
   */
  described(name: string): RegisteredModel | undefined {
    const family = this.#families.get(name);
    return this.#models.get(family ? `${name}${VERSION_SEPARATOR}${versionOf(family)}` : name);
  }
}
