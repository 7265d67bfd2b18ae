import { readFile } from 'node:fs/promises';
import { isAbsolute, resolve } from 'node:path';
import { z } from 'zod';
import type { ModelManifest } from '../../../protocol/index.js';
import { PICTURE_INPUTS, WorkflowNode, type ComfyUiSettings, type NamedInput, type PictureInput, type Target, type Workflow } from '../../../protocol/engines/comfyui.js';
import { Workflow as ClientWorkflow } from '../../../protocol/index.js';
import { EngineError } from '../../core/engine.js';

/** The workflow and where each named input goes, checked against each other. */
export interface ResolvedWorkflow {
  workflow: Workflow;
  inputs: Partial<Record<NamedInput | PictureInput, Target>>;
  outputNodes: string[] | null;
}

const invalid = (manifest: ModelManifest, detail: string): EngineError =>
  new EngineError('ENGINE_FAILED', `model "${manifest.name}" (comfyui): ${detail}`, false);

/**
 * Read the workflow (inline, a file, or the model file) and check every mapped node and field exists. Null: the model
 * has none, and runs only clients' workflows (`acceptWorkflows`), or is only passed through to clients (`passthrough`).
 */
export async function resolveWorkflow(settings: ComfyUiSettings, manifest: ModelManifest, modelPath: string | null): Promise<ResolvedWorkflow | null> {
  let raw: unknown = settings.workflow;
  // A model only passed through to clients (Krita brings its own workflows) needs none either.
  if (raw === undefined && modelPath === null && (settings.acceptWorkflows || settings.passthrough)) return null;
  if (raw === undefined && modelPath === null) throw invalid(manifest, 'settings.workflow is required: the model has no file to read the workflow from (or set acceptWorkflows, to run only clients\' workflows)');
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

/**
 * What a job runs: the model's own workflow with the job's inputs filled in (`template`), a client's whole workflow
 * (`client`: a `workflow` job), or — a workflow job whose graph is empty — nothing but a look at whether the server is
 * up (`probe`: the mesh's health probe of a model that has no workflow of its own). `refused` says why this host
 * cannot run it; `retryable` when another host may.
 */
export type JobPrompt =
  | { kind: 'template' | 'client'; workflow: Workflow }
  | { kind: 'probe' }
  | { kind: 'refused'; message: string; retryable: boolean };

export function promptFor(resolved: ResolvedWorkflow | null, settings: ComfyUiSettings, model: string, input: Record<string, unknown>): JobPrompt {
  if (input.workflow !== undefined) {
    if (!settings.acceptWorkflows) {
      return { kind: 'refused', message: `model "${model}" (comfyui) does not run clients' workflows on this host: its owner has not set settings.acceptWorkflows in the host's config`, retryable: true };
    }
    if (input.workflow !== null && typeof input.workflow === 'object' && Object.keys(input.workflow).length === 0) return { kind: 'probe' };
    const parsed = ClientWorkflow.safeParse(input.workflow);
    if (!parsed.success) return { kind: 'refused', message: `model "${model}" (comfyui): the job's workflow is not an API-format workflow: ${parsed.error.issues[0]?.message ?? 'invalid'}`, retryable: false };
    return { kind: 'client', workflow: parsed.data };
  }
  if (!resolved) {
    const serves = settings.acceptWorkflows ? 'it runs only clients\' workflows (workflow jobs)' : 'it is only passed through to clients (passthrough)';
    return { kind: 'refused', message: `model "${model}" (comfyui) has no workflow of its own (settings.workflow): ${serves}`, retryable: false };
  }
  return { kind: 'template', workflow: fillWorkflow(resolved, input) };
}

/** A client's workflow with every input value that names one of its pictures replaced by the name it was uploaded under. */
export function withPictures(workflow: Workflow, uploaded: ReadonlyMap<string, string>): Workflow {
  if (uploaded.size === 0) return workflow;
  const copy = structuredClone(workflow);
  for (const node of Object.values(copy)) {
    for (const [field, value] of Object.entries(node.inputs)) {
      if (typeof value === 'string' && uploaded.has(value)) node.inputs[field] = uploaded.get(value);
    }
  }
  return copy;
}
