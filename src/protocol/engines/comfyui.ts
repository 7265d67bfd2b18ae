import { z } from 'zod';
import { settingsNamed, type EngineDescriptor } from './descriptor.js';
import { COMFYUI_MARKUP } from './markup.js';
import { launchSettings, SERVER_HOST_SETTINGS, urlOrCommand } from './server-settings.js';

/** The job inputs a workflow can take as values, in the names gpumesh's image jobs use. */
export const NAMED_INPUTS = ['prompt', 'negativePrompt', 'seed', 'width', 'height', 'steps', 'strength'] as const;
export type NamedInput = (typeof NAMED_INPUTS)[number];

/**
 * The pictures a workflow can take (`image`, `mask`): each is uploaded to ComfyUI (`/upload/image`, `/upload/mask`)
 * under a name of the job's, and that name goes into the node input the settings point at — a LoadImage node's
 * `image`, a LoadImageMask node's `image`.
 */
export const PICTURE_INPUTS = ['image', 'mask'] as const;
export type PictureInput = (typeof PICTURE_INPUTS)[number];

const Target = z.strictObject({
  /** The node id in the API-format workflow (`"6"`). */
  node: z.string().min(1),
  /** The node's input field (`"text"`). */
  field: z.string().min(1),
});
export type Target = z.infer<typeof Target>;

export { WorkflowNode, type Workflow } from '../workflows.js';

/**
 * `settings` of a ComfyUI model. The options type is the configuration
 * reference: every field says its default.
 */
export const ComfyUiSettings = z.strictObject({
  /** A ComfyUI server the person already runs (`http://127.0.0.1:8188`). Without it the agent starts one from `command`. */
  url: z.url().optional(),
  /**
   * A ComfyUI the agent starts (`command: python main.py --listen 127.0.0.1 --port ${PORT} --cuda-device ${GPU}`, …);
   * readiness by default: `GET /system_stats` answers 2xx.
   */
  ...launchSettings({ http: '/system_stats' }),
  /**
   * Run the whole workflows clients send (`workflow` jobs: the ComfyUI-compatible front door, docs/api.md), not only
   * this model's own: its owner's opt-in, which only the host's own config may give (like `url` and `command`), so the
   * mesh never has a host's ComfyUI run a graph its owner did not agree to. The model then serves the `workflow` job
   * type (mesh.yaml `types: [workflow]`), the agent reports what its ComfyUI offers (`/object_info`) so the mesh sends
   * each workflow to a host that has its nodes and models, and `workflow` below is optional. Default false.
   */
  acceptWorkflows: z.boolean().default(false),
  /**
   * The API-format workflow ("Export (API)" in ComfyUI): a path to its JSON file (relative paths resolve
   * against the agent's working directory) or the workflow inline. Default: the model's file itself (none needed
   * with `acceptWorkflows`).
   */
  workflow: z.union([z.string().min(1), z.record(z.string(), z.unknown())]).optional(),
  /**
   * Where each named job input goes: `{ prompt: { node: "6", field: "text" }, seed: { node: "3", field: "seed" } }`.
   * `image` and `mask` name the LoadImage (LoadImageMask) node input that takes the uploaded picture's name; a model
   * that names neither is refused jobs that carry a picture (400 INVALID_INPUT at submit).
   */
  inputs: z.partialRecord(z.enum([...NAMED_INPUTS, ...PICTURE_INPUTS]), Target).default({}),
  /** Take images only from these nodes (e.g. the SaveImage node). Default: every node's `output` images. */
  outputNodes: z.array(z.string().min(1)).min(1).optional(),
  /** Limit for one batch, queueing included. Default 30 minutes. */
  timeoutMs: z.int().positive().default(30 * 60_000),
  /** Limit for one HTTP request. Default 30 s. */
  requestTimeoutMs: z.int().positive().default(30_000),
  /** How often /history is polled once the WebSocket has dropped. Default 500 ms. */
  pollIntervalMs: z.int().positive().default(500),
  /**
   * How long a server that does not answer (starting, restarting) is waited for — `GET /system_stats` tried with a
   * backoff of 100 ms growing to 2 s — before the jobs it holds fail (ENGINE_UNREACHABLE, counted by the replica's
   * breaker) and move elsewhere. Meanwhile they are held as NOT_READY. A ComfyUI was seen to answer 5–7 s after a
   * restart; one with many custom nodes takes longer. Keep it below the mesh's attempt timeout
   * (`health.attemptTimeout.floorMs`, 10 s by default), or the orchestrator gives up on the batch first. Default 8 s.
   */
  readyWaitMs: z.int().min(0).default(8_000),
  /** A job's previews (its `previews`, at most 3) are at least this far apart; of the frames ComfyUI sends meanwhile, the newest is kept. Default 1 s. */
  previewIntervalMs: z.int().min(0).default(1000),
  /** Ask ComfyUI to unload its models and free memory (`POST /free`) when gpumesh unloads the model. Default true. */
  freeOnUnload: z.boolean().default(true),
  /**
   * Let clients whose grant may submit jobs to this model (on this host) use this ComfyUI directly, through the
   * orchestrator's pass-through (`/comfyui/<host>/<model>/…`): every route ComfyUI and its custom nodes serve, and its
   * WebSocket — Krita's AI Diffusion plugin needs that. Only the host's own config may say so (a host setting): the
   * owner opens their ComfyUI, no orchestrator can. Default false.
   */
  passthrough: z.boolean().default(false),
}).superRefine(urlOrCommand);
export type ComfyUiSettings = z.infer<typeof ComfyUiSettings>;

/** ComfyUI workflows, on a ComfyUI fronted or started by the agent. Job inputs replace whole node fields (never spliced into a template), so only ComfyUI's own prompt syntax needs refusing. */
export const comfyUiDescriptor: EngineDescriptor<typeof ComfyUiSettings> = {
  name: 'comfyui', settings: ComfyUiSettings, server: true, needsFile: false, controlMarkup: COMFYUI_MARKUP,
  // A workflow given as a path is a file of the host's; one given inline is data the mesh may send.
  // So are the opt-ins to run clients' whole workflows and to pass the server through to clients: only the host's owner
  // may give them.
  hostSettingsOf: (settings) => [
    ...settingsNamed([...SERVER_HOST_SETTINGS, 'passthrough'])(settings), ...(typeof settings.workflow === 'string' ? ['workflow'] : []),
    ...(settings.acceptWorkflows !== undefined ? ['acceptWorkflows'] : []),
  ],
  hostDeclared: true,
  // The pictures the model's workflow has a node for: only those may a job carry.
  pictureInputs: (settings) => PICTURE_INPUTS.filter((field) => (settings.inputs as Record<string, unknown> | undefined)?.[field] !== undefined),
  pictureRefusal: (field) => `this comfyui model names no node that takes it (settings.inputs.${field}); send the job to a model whose workflow loads a picture`,
};
