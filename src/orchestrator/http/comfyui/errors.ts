import type { FastifyError, FastifyInstance } from 'fastify';
import type { MeshError, WorkflowMisfit } from '../../../protocol/index.js';
import { settleUnreadBody, toMeshError } from '../errors.js';

/** One error as ComfyUI words it (execution.py's validate_prompt): what kind, a sentence, more detail, and what input. */
export interface ComfyReason {
  type: string;
  message: string;
  details: string;
  extra_info: Record<string, unknown>;
}

/** A node's errors in `node_errors`, as ComfyUI's validation reports them. */
export interface ComfyNodeErrors {
  errors: ComfyReason[];
  dependent_outputs: string[];
  class_type: string;
}

/** ComfyUI's error answer: `{error: {type, message, details, extra_info}, node_errors: {<node id>: …}}`. */
export interface ComfyErrorBody {
  error: ComfyReason;
  node_errors: Record<string, ComfyNodeErrors>;
}

/**
 * What the hosts' ComfyUIs lack, as ComfyUI itself would refuse the workflow: a node class none has is
 * `invalid_prompt` ("Cannot execute because node X does not exist."), a value not among a combo's choices (a checkpoint
 * no host has) is `prompt_outputs_failed_validation` with the node's `value_not_in_list` error.
 */
export function misfitBody(misfits: readonly WorkflowMisfit[]): ComfyErrorBody {
  const missing = misfits.find((misfit) => misfit.kind === 'missing_class');
  if (missing) {
    return {
      error: { type: 'invalid_prompt', message: `Cannot execute because node ${missing.classType} does not exist.`, details: `Node ID '#${missing.node}'`, extra_info: {} },
      node_errors: {},
    };
  }
  const nodeErrors: Record<string, ComfyNodeErrors> = {};
  for (const misfit of misfits) {
    if (misfit.kind !== 'value_not_in_list') continue;
    const entry = nodeErrors[misfit.node] ??= { errors: [], dependent_outputs: [], class_type: misfit.classType };
    entry.errors.push({
      type: 'value_not_in_list', message: 'Value not in list',
      details: `${misfit.input}: '${misfit.value.slice(0, 200)}' not in ${JSON.stringify(misfit.choices)}`, extra_info: { input_name: misfit.input },
    });
  }
  const details = Object.values(nodeErrors).flatMap((entry) => entry.errors.map((reason) => `${reason.message}: ${reason.details}`)).join('\n');
  return { error: { type: 'prompt_outputs_failed_validation', message: 'Prompt outputs failed validation', details, extra_info: {} }, node_errors: nodeErrors };
}

/** A refusal already in ComfyUI's words (`{error, node_errors}`), with its status: what the door answers as it is. */
export class ComfyRefusal extends Error {
  constructor(readonly status: number, readonly body: ComfyErrorBody) {
    super(body.error.message);
  }
}

/** A mesh error in ComfyUI's shape: its code (lower case) as the type, gpumesh's code in `extra_info.code`. */
export function comfyErrorBody(mesh: MeshError): ComfyErrorBody {
  const misfits = mesh.params.misfits;
  if (mesh.code === 'WORKFLOW_UNSUPPORTED' && Array.isArray(misfits) && misfits.length > 0) return misfitBody(misfits as WorkflowMisfit[]);
  return { error: { type: mesh.code.toLowerCase(), message: mesh.message, details: '', extra_info: { code: mesh.code } }, node_errors: {} };
}

/**
 * Every error of the ComfyUI-compatible door in ComfyUI's shape (its clients read `error.message`; SillyTavern and
 * Open WebUI only the status), with gpumesh's status and headers (Retry-After, WWW-Authenticate): never a 500 for a
 * client's mistake.
 */
export function installComfyErrors(scope: FastifyInstance): void {
  scope.setErrorHandler((error: FastifyError, request, reply) => {
    if (error instanceof ComfyRefusal) return void reply.code(error.status).header('x-content-type-options', 'nosniff').send(error.body);
    const mesh = toMeshError(error, request);
    if (mesh.status >= 500) reply.log.warn({ code: mesh.code }, mesh.message);
    settleUnreadBody(request, reply);
    void reply.code(mesh.status).headers(mesh.headers).header('x-content-type-options', 'nosniff').type('application/json; charset=utf-8').send(comfyErrorBody(mesh));
  });
}
