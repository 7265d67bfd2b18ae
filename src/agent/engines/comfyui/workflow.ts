import { readFile } from 'node:fs/promises';
import { isAbsolute, resolve } from 'node:path';
import { z } from 'zod';
import type { ModelManifest } from '../../../protocol/index.js';
import { PICTURE_INPUTS, WorkflowNode, type ComfyUiSettings, type NamedInput, type PictureInput, type Target, type Workflow } from '../../../protocol/engines/comfyui.js';
import { EngineError } from '../../core/engine.js';

/** The workflow and where each named input goes, checked against each other. */
export interface ResolvedWorkflow {
  workflow: Workflow;
  inputs: Partial<Record<NamedInput | PictureInput, Target>>;
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
  for (const [name, target] of Object.entries(settings.inputs) as [NamedInput | PictureInput, Target][]) {
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

const isPicture = (name: string): name is PictureInput => (PICTURE_INPUTS as readonly string[]).includes(name);

/**
 * A copy of the workflow with the job's named inputs filled in; a picture's node gets the name the picture was
 * uploaded under (`pictures`), never the job's digest.
 */
export function fillWorkflow(resolved: ResolvedWorkflow, input: Record<string, unknown>, pictures: Partial<Record<PictureInput, string>> = {}): Workflow {
  const filled = structuredClone(resolved.workflow);
  for (const [name, target] of Object.entries(resolved.inputs) as [NamedInput | PictureInput, Target][]) {
    const value = isPicture(name) ? pictures[name] : input[name];
    if (value !== undefined) filled[target.node]!.inputs[target.field] = value;
  }
  return filled;
}
