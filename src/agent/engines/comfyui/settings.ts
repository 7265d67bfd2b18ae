import { readFile } from 'node:fs/promises';
import { isAbsolute, resolve } from 'node:path';
import { z } from 'zod';
import type { ModelManifest } from '../../../protocol/index.js';
import { EngineError } from '../engine.js';
import { launchSettings, urlOrCommand } from '../shared/launch-settings.js';

/** The job inputs a workflow can take, in the names gpumesh's image jobs use. */
export const NAMED_INPUTS = ['prompt', 'negativePrompt', 'seed', 'width', 'height', 'steps'] as const;
export type NamedInput = (typeof NAMED_INPUTS)[number];

const Target = z.strictObject({
  /** The node id in the API-format workflow (`"6"`). */
  node: z.string().min(1),
  /** The node's input field (`"text"`). */
  field: z.string().min(1),
});
export type Target = z.infer<typeof Target>;

/** One node of an API-format workflow: `{ class_type, inputs }` (links are `[nodeId, slot]`). */
const WorkflowNode = z.looseObject({
  class_type: z.string().min(1),
  inputs: z.record(z.string(), z.unknown()),
});
export type Workflow = Record<string, z.infer<typeof WorkflowNode>>;

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
   * The API-format workflow ("Export (API)" in ComfyUI): a path to its JSON file (relative paths resolve
   * against the agent's working directory) or the workflow inline. Default: the model's file itself.
   */
  workflow: z.union([z.string().min(1), z.record(z.string(), z.unknown())]).optional(),
  /** Where each named job input goes: `{ prompt: { node: "6", field: "text" }, seed: { node: "3", field: "seed" } }`. */
  inputs: z.partialRecord(z.enum(NAMED_INPUTS), Target).default({}),
  /** Take images only from these nodes (e.g. the SaveImage node). Default: every node's `output` images. */
  outputNodes: z.array(z.string().min(1)).min(1).optional(),
  /** Limit for one batch, queueing included. Default 30 minutes. */
  timeoutMs: z.int().positive().default(30 * 60_000),
  /** Limit for one HTTP request. Default 30 s. */
  requestTimeoutMs: z.int().positive().default(30_000),
  /** How often /history is polled once the WebSocket has dropped. Default 500 ms. */
  pollIntervalMs: z.int().positive().default(500),
  /** Ask ComfyUI to unload its models and free memory (`POST /free`) when gpumesh unloads the model. Default true. */
  freeOnUnload: z.boolean().default(true),
}).superRefine(urlOrCommand);
export type ComfyUiSettings = z.infer<typeof ComfyUiSettings>;

/** The workflow and where each named input goes, checked against each other. */
export interface ResolvedWorkflow {
  workflow: Workflow;
  inputs: Partial<Record<NamedInput, Target>>;
  outputNodes: string[] | null;
}

const invalid = (manifest: ModelManifest, detail: string): EngineError =>
  new EngineError('ENGINE_FAILED', `model "${manifest.name}" (comfyui): ${detail}`, false);

/** Read the workflow (inline, a file, or the model file) and check every mapped node and field exists. */
export async function resolveWorkflow(settings: ComfyUiSettings, manifest: ModelManifest, modelPath: string | null): Promise<ResolvedWorkflow> {
  let raw: unknown = settings.workflow;
  if (raw === undefined && modelPath === null) throw invalid(manifest, 'settings.workflow is required: the model has no file to read the workflow from');
  if (raw === undefined || typeof raw === 'string') {
    const path = raw === undefined ? modelPath! : isAbsolute(raw) ? raw : resolve(raw);
    try {
      raw = JSON.parse(await readFile(path, 'utf8'));
    } catch (error) {
      throw invalid(manifest, `cannot read the workflow ${path}: ${(error as Error).message}`);
    }
  }
  if (raw && typeof raw === 'object' && 'nodes' in raw && 'links' in raw) {
    throw invalid(manifest, 'the workflow is in ComfyUI\'s UI format; export it with "Export (API)" instead');
  }
  const parsed = z.record(z.string(), WorkflowNode).safeParse(raw);
  if (!parsed.success || Object.keys(parsed.data).length === 0) {
    const issue = parsed.success ? null : parsed.error.issues[0];
    throw invalid(manifest, `the workflow is not an API-format workflow${issue ? ` (node ${issue.path.map(String).join('.')}: ${issue.message})` : ' (no nodes)'}`);
  }
  const workflow = parsed.data;
  for (const [name, target] of Object.entries(settings.inputs) as [NamedInput, Target][]) {
    const node = workflow[target.node];
    if (!node) throw invalid(manifest, `settings.inputs.${name}: the workflow has no node "${target.node}"`);
    if (!(target.field in node.inputs)) {
      throw invalid(manifest, `settings.inputs.${name}: node "${target.node}" (${node.class_type}) has no input "${target.field}" (it has: ${Object.keys(node.inputs).join(', ')})`);
    }
    if (Array.isArray(node.inputs[target.field])) {
      throw invalid(manifest, `settings.inputs.${name}: node "${target.node}" input "${target.field}" is a link to another node, not a value`);
    }
  }
  for (const id of settings.outputNodes ?? []) {
    if (!workflow[id]) throw invalid(manifest, `settings.outputNodes: the workflow has no node "${id}"`);
  }
  return { workflow, inputs: settings.inputs, outputNodes: settings.outputNodes ?? null };
}

/** A copy of the workflow with the job's named inputs filled in. */
export function fillWorkflow(resolved: ResolvedWorkflow, input: Record<string, unknown>): Workflow {
  const filled = structuredClone(resolved.workflow);
  for (const [name, target] of Object.entries(resolved.inputs) as [NamedInput, Target][]) {
    const value = input[name];
    if (value !== undefined) filled[target.node]!.inputs[target.field] = value;
  }
  return filled;
}
