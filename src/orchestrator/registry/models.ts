import { MeshError, type ModelManifest } from '../../protocol/index.js';
import { builtinModels } from '../../models/index.js';
import { ConfigError, policyFor, type MeshConfig, type ResolvedModelPolicy } from '../config.js';
import type { BlobStore } from './blob-store.js';
import { PIPELINES, type Pipeline } from './pipelines.js';

export interface RegisteredModel {
  manifest: ModelManifest;
  policy: ResolvedModelPolicy;
  pipeline: Pipeline;
}

/** Batching defaults of the built-in models, tuned on a 2-core CPU (see bench/RESULTS.md). */
const BUILTIN_POLICIES: Record<string, Partial<ResolvedModelPolicy>> = {
  gen: { batching: { maxBatchSize: 4, preferredBatchSizes: [4], maxQueueDelayMs: 0 } },
  mlp: { batching: { maxBatchSize: 32, preferredBatchSizes: [8, 16, 32], maxQueueDelayMs: 2 } },
};

/**
 * The model registry: manifests by name, their files in the blob store. The
 * built-in models are built in memory (deterministically, so their digests
 * never change) and stored on first start.
 */
export class ModelRegistry {
  readonly #models = new Map<string, RegisteredModel>();
  readonly #config: MeshConfig;

  constructor(config: MeshConfig) {
    this.#config = config;
  }

  async addBuiltins(blobs: BlobStore, recordBlob: (digest: string, bytes: number, mediaType: string) => void): Promise<void> {
    for (const builtin of builtinModels()) {
      const stored = await blobs.putBytes(builtin.bytes, builtin.digest);
      recordBlob(stored.digest, stored.bytes, 'application/onnx');
      const params: Record<string, number | string> = {};
      if (builtin.defaultSteps !== undefined) params.defaultSteps = builtin.defaultSteps;
      for (const spec of builtin.inputs) if (spec.name === 'x') params.inputDim = Number(spec.shape[1]);
      for (const spec of builtin.outputs) if (spec.name === 'y') params.outputDim = Number(spec.shape[1]);
      this.add({
        name: builtin.name, version: builtin.version, engine: builtin.engine,
        pipeline: builtin.kind === 'generator' ? 'cppn-image' : 'tensor',
        digest: stored.digest, bytes: stored.bytes, memoryMB: builtin.memoryMB, jobTypes: builtin.jobTypes, params, settings: {},
      });
    }
  }

  add(manifest: ModelManifest): void {
    this.#models.set(manifest.name, {
      manifest,
      policy: policyFor(this.#config, manifest.name, BUILTIN_POLICIES[manifest.name]),
      pipeline: PIPELINES[manifest.pipeline],
    });
  }

  /** Every `models:` entry of the config must name a model the registry has (a typo would otherwise be ignored). */
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
