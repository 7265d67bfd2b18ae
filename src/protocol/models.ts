import { z } from 'zod';

/**
 * What an engine needs to know to load and run a model. The orchestrator's
 * registry owns these manifests; agents receive them inside `run` and `load`.
 */
export const ModelManifest = z.object({
  name: z.string(),
  version: z.string(),
  /** Which engine runs it (`onnx`, …). */
  engine: z.string(),
  /** How the engine turns job inputs into tensors and tensors into outputs. */
  pipeline: z.enum(['cppn-image', 'tensor']),
  /** The model file in the content-addressed store. */
  digest: z.string(),
  bytes: z.number(),
  /** Resident memory the model needs once loaded (planning figure; the agent measures the real one). */
  memoryMB: z.number(),
  jobTypes: z.array(z.string()),
  /** Pipeline parameters, e.g. the tensor model's input and output widths. */
  params: z.record(z.string(), z.union([z.number(), z.string()])).default({}),
  /** Engine-specific settings (a server's URL, a workflow file, a command), validated by that engine's own schema. */
  settings: z.record(z.string(), z.unknown()).optional(),
});
export type ModelManifest = z.infer<typeof ModelManifest>;
