import { join } from 'node:path';
import { MeshError, type ModelManifest } from '../../protocol/index.js';
import { builtinModels } from '../../models/index.js';
import { ConfigError, policyFor, type MeshConfig, type ModelPolicyDefaults, type ResolvedModelPolicy } from '../config/config.js';
import type { BlobStore } from '../blobs/blob-store.js';
import { definitionDigest, modelDefinitions, type ModelDefinition } from '../config/declared-models.js';
import { ModelFiles } from './model-files.js';
import { pipelineFor, pipelineForEngine, type Pipeline } from '../pipelines/pipelines.js';
import { engineDescriptor } from '../../protocol/engines/index.js';

export type RecordBlob = (digest: string, bytes: number, mediaType: string) => void;

export interface RegisteredModel {
  manifest: ModelManifest;
  policy: ResolvedModelPolicy;
  pipeline: Pipeline;
}

/** How the ONNX engine feeds each kind of built-in model (its `settings.pipeline`). */
const ONNX_PIPELINE_OF = { generator: 'cppn-image', video: 'cppn-video', tensor: 'tensor' } as const;

/** Batching defaults of the built-in models, tuned on a 2-core CPU (see bench/RESULTS.md). */
const BUILTIN_POLICIES: Record<string, ModelPolicyDefaults> = {
  gen: { batching: { maxBatchSize: 4, preferredBatchSizes: [4], maxQueueDelayMs: 0 } },
  // A clip is dozens of images already (the engine runs frames in chunks); clips run one at a time.
  'gen-video': { batching: { maxBatchSize: 1, preferredBatchSizes: [1], maxQueueDelayMs: 0 } },
  mlp: { batching: { maxBatchSize: 32, preferredBatchSizes: [8, 16, 32], maxQueueDelayMs: 2 } },
};

/**
 * The model registry: manifests by name, their files in the blob store. The
 * built-in models are built in memory (deterministically, so their digests
 * never change) and stored on first start; models declared in mesh.yaml have
 * their files imported at start (or have none).
 */
export class ModelRegistry {
  readonly #models = new Map<string, RegisteredModel>();
  readonly #config: MeshConfig;

  constructor(config: MeshConfig) {
    this.#config = config;
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
        settings: { pipeline: ONNX_PIPELINE_OF[builtin.kind], ...(builtin.threads !== undefined ? { threads: builtin.threads } : {}) },
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
        memoryMB: definition.memoryMB, jobTypes: definition.jobTypes, params: definition.params, settings: definition.settings,
      });
    }
    return definitions;
  }

  /** Register a manifest; its job types' input handling must exist (the first type's serves them all). */
  add(manifest: ModelManifest): void {
    const pipeline = pipelineFor(manifest.jobTypes[0] ?? '');
    if (!pipeline) throw new ConfigError(`model "${manifest.name}": no input handling for job type "${manifest.jobTypes[0] ?? '(none)'}"`);
    this.#models.set(manifest.name, {
      manifest,
      policy: policyFor(this.#config, manifest.name, BUILTIN_POLICIES[manifest.name]),
      // An engine this orchestrator does not know (one only some agents run) has no markup it could refuse.
      pipeline: pipelineForEngine(pipeline, engineDescriptor(manifest.engine)),
    });
  }

  /** Every `models:` entry of the config must name a model the registry has (a policy for a typo would otherwise be ignored). */
  checkPolicies(): void {
    const unknown = Object.keys(this.#config.models).filter((name) => !this.#models.has(name));
    if (unknown.length > 0) {
      const known = [...this.#models.keys()].join(', ');
      throw new ConfigError(`invalid mesh config:\n${unknown.map((name) => `  models.${name}: no model "${name}" in the registry (it has: ${known})`).join('\n')}`);
    }
  }

  get(name: string): RegisteredModel | undefined {
    return this.#models.get(name);
  }

  all(): RegisteredModel[] {
    return [...this.#models.values()];
  }

  /** Resolve the model a job runs on: the named one, or the config's default for its type. */
  resolve(jobType: string, name: string | undefined): RegisteredModel {
    const modelName = name ?? this.#config.defaultModels[jobType];
    const known = [...this.#models.keys()].join(', ');
    if (!modelName) throw new MeshError('UNKNOWN_MODEL', { model: '(none)', known });
    const model = this.#models.get(modelName);
    if (!model) throw new MeshError('UNKNOWN_MODEL', { model: modelName, known });
    if (!model.manifest.jobTypes.includes(jobType)) throw new MeshError('MODEL_TYPE_MISMATCH', { model: modelName, type: jobType });
    return model;
  }
}
