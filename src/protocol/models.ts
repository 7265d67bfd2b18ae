import { z } from 'zod';
import { TensorSpec } from './tensors.js';

/**
 * What an engine needs to know to load and run a model. The orchestrator's
 * registry owns these manifests (the built-in ones and those declared in
 * mesh.yaml); agents receive them inside `run` and `load`. Nothing here is
 * specific to one engine: how a job's input is checked is the job type's
 * concern (the orchestrator's pipelines), and what only one engine needs
 * (the ONNX engine's pipeline, a server's command) is in `settings`.
 */
/** The separator of a model version's own name: `ocr-det@2` is version `2` of the model clients call `ocr-det`. */
export const VERSION_SEPARATOR = '@';

/**
 * The name clients and grants use for a model (`ocr-det` of `ocr-det@2`): a `models` caveat naming a model allows
 * every version of it. A model without versions (built in, declared in mesh.yaml) is its own.
 */
export const familyOf = (name: string): string => name.split(VERSION_SEPARATOR)[0]!;

export const ModelManifest = z.object({
  name: z.string(),
  version: z.string(),
  /** Which engine runs it (`onnx`, `sdcpp`, …): a name an agent lists in its hello. */
  engine: z.string(),
  /**
   * The model's identity: the `sha256:` digest of its file in the content-addressed store or, for a model
   * without a file (`file: false`), of its definition — so a changed definition is a new version.
   */
  digest: z.string(),
  /**
   * Whether `digest` names a file the agent pulls (and verifies) before `load` (absent: it does). False for a
   * server that loads its own weights or a URL the person runs: the agent pulls nothing and the engine gets no path.
   */
  file: z.boolean().optional(),
  /** The file's size (0 without a file); a model of several files: their sizes together. */
  bytes: z.number(),
  /**
   * A model of several files (a detector, a recogniser and its dictionary): each by the name the engine knows it by,
   * stored by digest. `digest` then names the version's index — a small JSON listing of these members, stored like
   * any blob — so a version is still one stored blob by digest; the agent pulls every member, verified, and hands
   * the engine their paths by name. Absent: one file, `digest` itself.
   */
  files: z.record(z.string(), z.object({ digest: z.string(), bytes: z.number() })).optional(),
  /** Resident memory the model needs once loaded (planning figure; the agent measures the real one). */
  memoryMB: z.number(),
  /**
   * Where `memoryMB` comes from, for a model added at run time: `given` (`--memory`), `estimate` (a guess from the file's
   * size, replaced by the agent's measure at the model's first load), `measured`. Absent: declared or built in.
   */
  memoryFrom: z.enum(['given', 'estimate', 'measured']).optional(),
  jobTypes: z.array(z.string()),
  /** Parameters the orchestrator's pipeline and the engine read: input defaults (`defaultSteps`, `defaultWidth`, …), the tensor width (`inputDim`). */
  params: z.record(z.string(), z.union([z.number(), z.string()])).default({}),
  /** Engine-specific settings (a server's URL, a workflow file, a command), validated by that engine's own schema. */
  settings: z.record(z.string(), z.unknown()).optional(),
  /**
   * A tensor model's inputs and outputs (read from its ONNX file when it was added, or declared): what a `tensor`
   * job must send, checked at admission. Absent: the older single-input form (`x` of `params.inputDim` values).
   */
  inputs: z.array(TensorSpec).max(64).optional(),
  outputs: z.array(TensorSpec).max(64).optional(),
});
export type ModelManifest = z.infer<typeof ModelManifest>;

/** Every blob a model's agent pulls: its file (or its index) and, for a model of several files, each member. */
export const modelDigests = (manifest: Pick<ModelManifest, 'digest' | 'files'>): string[] =>
  [manifest.digest, ...Object.values(manifest.files ?? {}).map((member) => member.digest)];
