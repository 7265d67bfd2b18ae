import type { ModelManifest } from '../../../protocol/index.js';
import { EngineError } from '../../core/engine.js';
import { BINARY_EXTENSION, type ModelMetadata, type OipClient, type TensorMetadata } from './client.js';
import type { OipSettings } from '../../../protocol/engines/oip.js';
import { isNumeric } from './tensors.js';

/** How jobs of one model become infer requests; worked out once, at load. */
export interface InferPlan {
  /** `/v2/models/{m}[/versions/{v}]` */
  path: string;
  input: TensorMetadata;
  output: string;
  /** One job's shape: the input's shape without the batch axis when the model batches (−1 = any size). */
  sampleShape: number[];
  /** Jobs per request (1 when the model does not batch). */
  maxBatch: number;
  batching: boolean;
  binary: boolean;
}

const invalid = (manifest: ModelManifest, detail: string): EngineError =>
  new EngineError('ENGINE_FAILED', `model "${manifest.name}" (oip): ${detail}`, false);

export function modelPath(settings: OipSettings, manifest: ModelManifest): string {
  const name = encodeURIComponent(settings.model ?? manifest.name);
  return settings.version ? `/v2/models/${name}/versions/${encodeURIComponent(settings.version)}` : `/v2/models/${name}`;
}

/**
 * Pick the input and output, and decide batching: a model batches when its
 * input's first dimension is −1 and rank is at least 2 — unless Triton's model
 * configuration says `max_batch_size` 0 (then that −1 is an ordinary variable
 * dimension).
 */
export function planInference(
  manifest: ModelManifest, settings: OipSettings, metadata: ModelMetadata, extensions: readonly string[], configMaxBatch: number | null,
): InferPlan {
  const inputs = metadata.inputs ?? [];
  const input = settings.input ? inputs.find((candidate) => candidate.name === settings.input) : inputs.length === 1 ? inputs[0] : undefined;
  if (!input) {
    const names = inputs.map((candidate) => candidate.name).join(', ') || 'none';
    throw invalid(manifest, settings.input ? `the model has no input "${settings.input}" (it has: ${names})` : `the model has several inputs (${names}); name one in settings.input`);
  }
  if (!isNumeric(input.datatype)) throw invalid(manifest, `input "${input.name}" is ${input.datatype}; only numeric inputs take tensor jobs`);
  if (input.datatype === 'FP16' || input.datatype === 'BF16') throw invalid(manifest, `input "${input.name}" is ${input.datatype}, which this adapter cannot encode`);
  const outputs = metadata.outputs ?? [];
  const output = settings.output ? outputs.find((candidate) => candidate.name === settings.output) : outputs[0];
  if (!output) throw invalid(manifest, settings.output ? `the model has no output "${settings.output}"` : 'the model has no outputs');
  const batching = input.shape.length >= 2 && input.shape[0] === -1 && configMaxBatch !== 0;
  const maxBatch = batching ? settings.maxBatchSize ?? (configMaxBatch && configMaxBatch > 0 ? configMaxBatch : Number.POSITIVE_INFINITY) : 1;
  const binary = settings.binary === 'always' || (settings.binary === 'auto' && extensions.includes(BINARY_EXTENSION));
  return {
    path: modelPath(settings, manifest), input, output: output.name, sampleShape: batching ? input.shape.slice(1) : input.shape,
    maxBatch, batching, binary,
  };
}

/** The shape one job's `x` takes, or why it cannot: fixed dimensions must match; one −1 takes what is left. */
export function sampleShapeFor(plan: InferPlan, values: number): number[] | string {
  const fixed = plan.sampleShape.filter((dim) => dim !== -1).reduce((product, dim) => product * dim, 1);
  const variable = plan.sampleShape.filter((dim) => dim === -1).length;
  if (variable === 0) return values === fixed ? plan.sampleShape : `x must hold ${fixed} numbers (shape [${plan.sampleShape.join(', ')}]), not ${values}`;
  if (variable > 1) return `the input's shape [${plan.sampleShape.join(', ')}] has several variable dimensions; it cannot be inferred from a flat x`;
  if (values % fixed !== 0 || values === 0) return `x must hold a multiple of ${fixed} numbers (shape [${plan.sampleShape.join(', ')}]), not ${values}`;
  return plan.sampleShape.map((dim) => (dim === -1 ? values / fixed : dim));
}

/** Read what the plan needs from the server: extensions, the model's metadata, readiness, Triton's max_batch_size. */
export async function discover(client: OipClient, path: string): Promise<{ metadata: ModelMetadata; extensions: string[]; ready: boolean; configMaxBatch: number | null }> {
  const server = await client.serverMetadata();
  const extensions = server?.extensions ?? [];
  const metadata = await client.modelMetadata(path);
  const ready = await client.modelReady(path);
  const configMaxBatch = extensions.includes('model_configuration') ? await client.maxBatchSize(path).catch(() => null) : null;
  return { metadata, extensions, ready, configMaxBatch };
}
