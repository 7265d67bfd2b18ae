import { randomUUID } from 'node:crypto';
import type { FastifyRequest } from 'fastify';
import { z } from 'zod';
import { brokenLinks, doorPictureDigest, familyOf, MeshError, Workflow, WORKFLOW_LIMITS, type SubmitJobBody } from '../../../protocol/index.js';
import type { VerifiedGrant } from '../../auth/index.js';
import type { RegisteredModel } from '../../registry/index.js';
import { needsOf, type WorkflowNeeds } from '../../routing/index.js';
import { assertJsonDepth } from '../json-depth.js';
import { ComfyRefusal, misfitBody, type ComfyErrorBody } from './errors.js';
import { promptKey } from './prompt-book.js';
import type { ComfyDoorDeps } from './routes.js';

/**
 * `POST /prompt` as ComfyUI's server.py reads it: `prompt` (the API-format workflow), `client_id`, a `prompt_id` the
 * client chose (newer servers take it), `front` (to the front of the queue), `number`, `extra_data`. Other fields are
 * let pass, as ComfyUI lets them.
 */
const PromptBody = z.looseObject({
  prompt: z.unknown(),
  client_id: z.string().min(1).max(WORKFLOW_LIMITS.idChars).optional(),
  prompt_id: z.string().min(1).max(WORKFLOW_LIMITS.idChars).regex(/^[\w.:-]+$/, 'letters, digits, _ . : and - only').optional(),
  front: z.boolean().optional(),
  number: z.number().optional(),
  extra_data: z.record(z.string(), z.unknown()).optional(),
});

const invalidPrompt = (message: string, details = ''): ComfyRefusal =>
  new ComfyRefusal(400, { error: { type: 'invalid_prompt', message, details, extra_info: {} }, node_errors: {} });

/** Keys of `extra_data` never kept (credentials for ComfyUI's paid API nodes: they would show in /history and job views). */
const SECRET_EXTRA = new Set(['api_key_comfy_org', 'auth_token_comfy_org']);

/** A body as JSON, whatever its content type said (SillyTavern sends text/plain; urllib, form-encoded). */
export function jsonOf(body: unknown): unknown {
  if (body === undefined || body === null || body === '') return {};
  if (typeof body !== 'string') return body;
  let parsed: unknown;
  try {
    parsed = JSON.parse(body);
  } catch (error) {
    throw new MeshError('BAD_REQUEST', { detail: `the body is not JSON (${(error as Error).message})` });
  }
  assertJsonDepth(parsed, 'JSON body');
  return parsed;
}

/** The workflow of a prompt, checked as ComfyUI's validation would word its refusals of its shape and links. */
function workflowOf(prompt: unknown): Workflow {
  if (prompt === undefined) throw new ComfyRefusal(400, { error: { type: 'no_prompt', message: 'No prompt provided', details: 'No prompt provided', extra_info: {} }, node_errors: {} });
  if (prompt === null || typeof prompt !== 'object' || Array.isArray(prompt)) throw invalidPrompt('The prompt is not an API-format workflow', 'a JSON object of nodes by id');
  for (const [id, node] of Object.entries(prompt)) {
    if (node === null || typeof node !== 'object' || !('class_type' in node)) throw invalidPrompt('Cannot execute because a node is missing the class_type property.', `Node ID '#${id}'`);
  }
  const parsed = Workflow.safeParse(prompt);
  if (!parsed.success) {
    const issue = parsed.error.issues[0]!;
    throw invalidPrompt(`The prompt is not a valid workflow: ${issue.message}`, issue.path.length > 0 ? `Node ID '#${String(issue.path[0])}'` : '');
  }
  const broken = brokenLinks(parsed.data);
  if (broken.length > 0) {
    const nodeErrors: ComfyErrorBody['node_errors'] = {};
    for (const link of broken) {
      const entry = nodeErrors[link.node] ??= { errors: [], dependent_outputs: [], class_type: link.classType };
      entry.errors.push({ type: 'bad_linked_input', message: 'Bad linked input, must be a length-2 list of [node_id, slot_index]', details: link.input, extra_info: { input_name: link.input } });
    }
    throw new ComfyRefusal(400, { error: { type: 'prompt_outputs_failed_validation', message: 'Prompt outputs failed validation', details: '', extra_info: {} }, node_errors: nodeErrors });
  }
  return parsed.data;
}

/** The pictures a workflow names by the names the door gave them (`<hex>.png`): each value → its digest. */
function picturesOf(workflow: Workflow): Record<string, string> {
  const pictures: Record<string, string> = {};
  for (const node of Object.values(workflow)) {
    for (const value of Object.values(node.inputs)) {
      const digest = doorPictureDigest(value);
      if (digest) pictures[value as string] = digest;
    }
  }
  if (Object.keys(pictures).length > WORKFLOW_LIMITS.pictures) throw invalidPrompt(`The prompt names ${Object.keys(pictures).length} uploaded pictures; the mesh takes ${WORKFLOW_LIMITS.pictures} at most`);
  return pictures;
}

/** `extra_data` as kept with the prompt: without credentials or the client id (kept on its own), and only if small. */
function extraDataOf(extra: Record<string, unknown> | undefined): Record<string, unknown> | undefined {
  if (!extra) return undefined;
  const kept = Object.fromEntries(Object.entries(extra).filter(([key]) => !SECRET_EXTRA.has(key) && key !== 'client_id'));
  return JSON.stringify(kept).length <= WORKFLOW_LIMITS.extraDataChars ? kept : {};
}

/**
 * The model a prompt runs on: among the models that serve workflows and the grant may use (mesh.yaml's
 * `defaultModels.workflow` first), the first some connected host can run it on. None: the prompt is refused as
 * ComfyUI would refuse a node or a model it does not have.
 */
export function modelFor(grant: VerifiedGrant, needs: WorkflowNeeds, deps: Pick<ComfyDoorDeps, 'registry' | 'workflowFit' | 'workflowRouting'>): RegisteredModel {
  const { classes, defaultModel } = deps.workflowRouting;
  if (!classes) throw invalidPrompt('This mesh routes no workflow jobs: mesh.yaml\'s routing has no entry for the job type workflow');
  const allowed = grant.classes ? classes.filter((name) => grant.classes!.includes(name)) : classes;
  const seen = new Set<string>();
  const models = deps.registry.all()
    .filter((model) => model.manifest.jobTypes.includes('workflow') && (!grant.models || grant.models.includes(familyOf(model.manifest.name))))
    .map((model) => deps.registry.served(familyOf(model.manifest.name)) ?? model)
    .filter((model) => !seen.has(model.manifest.name) && seen.add(model.manifest.name))
    .sort((a, b) => Number(familyOf(b.manifest.name) === defaultModel) - Number(familyOf(a.manifest.name) === defaultModel));
  if (models.length === 0) {
    throw invalidPrompt('No model of this mesh runs ComfyUI workflows', 'a host\'s owner declares a comfyui model with types [workflow] and sets settings.acceptWorkflows in the host\'s own config');
  }
  let first: ReturnType<ComfyDoorDeps['workflowFit']['check']> | null = null;
  for (const model of models) {
    const fit = deps.workflowFit.check(model, allowed, needs);
    if (fit.fits) return model;
    first ??= fit;
  }
  if (first && !first.fits && first.why === 'missing') throw new ComfyRefusal(400, misfitBody(first.misfits));
  throw invalidPrompt('No connected host runs ComfyUI workflows', 'no host of this mesh\'s workflow models takes clients\' workflows (its owner sets settings.acceptWorkflows in the host\'s config)');
}

/** What a prompt becomes: the job to submit, and the prompt id its client knows it by. */
export function promptJob(request: FastifyRequest, grant: VerifiedGrant, deps: Pick<ComfyDoorDeps, 'registry' | 'workflowFit' | 'workflowRouting'>): { body: SubmitJobBody; promptId: string; clientId: string | null } {
  const parsed = PromptBody.safeParse(jsonOf(request.body));
  if (!parsed.success) {
    const issue = parsed.error.issues[0]!;
    throw invalidPrompt(`${issue.path.join('.') || 'body'}: ${issue.message}`);
  }
  const { prompt, client_id: clientId, prompt_id: chosen, front, extra_data: extra } = parsed.data;
  const workflow = workflowOf(prompt);
  const pictures = picturesOf(workflow);
  const input = { workflow, ...(Object.keys(pictures).length > 0 ? { pictures } : {}) };
  const model = modelFor(grant, needsOf(input)!, deps);
  const promptId = chosen ?? randomUUID();
  const extraData = extraDataOf(extra);
  return {
    promptId, clientId: clientId ?? null,
    body: {
      type: 'workflow', model: model.manifest.name, idempotencyKey: promptKey(promptId),
      // To the front: the highest level the grant allows.
      ...(front ? { priority: Math.max(1, grant.maxPriority ?? 1) } : {}),
      input: {
        ...input, promptId,
        ...(clientId ? { clientId, previews: 3 } : {}),
        ...(extraData && Object.keys(extraData).length > 0 ? { extraData } : {}),
      },
    },
  };
}
