import type { FastifyError, FastifyInstance } from 'fastify';
import type { MeshError } from '../../../protocol/index.js';
import { settleUnreadBody, toMeshError } from '../errors.js';

/** OpenAI's error `type` by status, as its SDKs and clients expect them. */
function typeOf(status: number): string {
  if (status === 401) return 'authentication_error';
  if (status === 403) return 'permission_error';
  if (status === 404) return 'not_found_error';
  if (status === 429) return 'rate_limit_error';
  return status >= 500 ? 'server_error' : 'invalid_request_error';
}

/** The request field a validation error names, when it names one (`size: …`, `image: …`). */
function paramOf(mesh: MeshError): string | null {
  const named = mesh.params.name ?? mesh.params.param;
  if (typeof named === 'string') return named;
  const detail = typeof mesh.params.detail === 'string' ? mesh.params.detail : '';
  return /^([a-z_]+)(?:\[\])?:/.exec(detail)?.[1] ?? null;
}

/** A MeshError in OpenAI's shape: `{"error": {"message", "type", "param", "code"}}`, with gpumesh's code in `code`. */
export function openAiErrorBody(mesh: MeshError): { error: { message: string; type: string; param: string | null; code: string } } {
  return { error: { message: mesh.message, type: typeOf(mesh.status), param: paramOf(mesh), code: mesh.code } };
}

/**
 * Every error under the OpenAI base path in OpenAI's shape (clients written for OpenAI read `error.message`; the
 * official SDKs map the status to their own error classes), with gpumesh's status and headers (Retry-After…).
 */
export function installOpenAiErrors(scope: FastifyInstance): void {
  scope.setErrorHandler((error: FastifyError, request, reply) => {
    const mesh = toMeshError(error, request);
    if (mesh.status >= 500) reply.log.warn({ code: mesh.code }, mesh.message);
    settleUnreadBody(request, reply);
    void reply.code(mesh.status).headers(mesh.headers).type('application/json; charset=utf-8').send(openAiErrorBody(mesh));
  });
  scope.setNotFoundHandler((request, reply) => {
    void reply.code(404).send({ error: { message: `Unknown OpenAI-compatible route ${request.method} ${request.url.split('?')[0]!}: gpumesh serves images/generations, images/edits and models`, type: 'invalid_request_error', param: null, code: 'ROUTE_NOT_FOUND' } });
  });
}
