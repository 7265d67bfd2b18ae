import type { FastifyError, FastifyInstance, FastifyRequest } from 'fastify';
import { MeshError } from '../../../protocol/index.js';
import { bodyTooLarge, settleUnreadBody, toMeshError } from '../errors.js';

/**
 * One problem with a request body as FastAPI (pydantic) reports it: where (`["body", "steps"]`), what, and its kind
 * (`type_error.integer`, `value_error.number.not_le`). A1111 answers a body it cannot validate with a list of them.
 */
export interface BodyIssue {
  loc: (string | number)[];
  msg: string;
  type: string;
  ctx?: Record<string, unknown>;
}

/**
 * A body the A1111 door refuses field by field: 422 `{"detail": [{loc, msg, type}]}` in FastAPI's shape. Elsewhere (the
 * audit log, a handler that does not know the door) it is the mesh's VALIDATION_FAILED, every issue in its message.
 */
export class BodyInvalid extends MeshError {
  readonly issues: readonly BodyIssue[];

  constructor(issues: readonly BodyIssue[]) {
    super('VALIDATION_FAILED', { detail: issues.map((issue) => `${issue.loc.slice(1).join('.') || 'body'}: ${issue.msg}`).join('; ') });
    this.issues = issues;
  }
}

/** A body refused for one field. */
export const invalid = (loc: (string | number)[], msg: string, type = 'value_error', ctx?: Record<string, unknown>): BodyInvalid =>
  new BodyInvalid([{ loc: ['body', ...loc], msg, type, ...(ctx ? { ctx } : {}) }]);

/** A1111's error answer (`api_middleware`'s handler): the mesh's code in `error`, where A1111 names the exception. */
export interface A1111ErrorBody {
  error: string;
  detail: string;
  body: string;
  errors: string;
}

/** The body of an error answered under `/sdapi/v1`: a validation failure as FastAPI's list, anything else as A1111's. */
export function a1111ErrorBody(mesh: MeshError): { status: number; body: A1111ErrorBody | { detail: BodyIssue[] } } {
  if (mesh instanceof BodyInvalid) return { status: 422, body: { detail: [...mesh.issues] } };
  // The mesh's own word that the body is not what it takes (the job's input schema, a JSON parse) is FastAPI's 422 too.
  if (mesh.code === 'VALIDATION_FAILED') return { status: 422, body: { detail: [{ loc: ['body'], msg: String(mesh.params.detail ?? mesh.message), type: 'value_error' }] } };
  return { status: mesh.status, body: { error: mesh.code, detail: mesh.message, body: '', errors: `${mesh.status}: ${mesh.message}` } };
}

/** Fastify's refusals of a body that is not JSON, which FastAPI answers as a 422 naming the body. */
const UNREADABLE_JSON = new Set(['FST_ERR_CTP_INVALID_JSON_BODY', 'FST_ERR_CTP_EMPTY_JSON_BODY']);

function meshErrorOf(error: FastifyError, request: FastifyRequest): MeshError {
  if (error.code && UNREADABLE_JSON.has(error.code)) {
    return invalid([], error.code === 'FST_ERR_CTP_EMPTY_JSON_BODY' ? 'field required' : `the body is not valid JSON (${error.message})`, 'value_error.jsondecode');
  }
  return toMeshError(error, request);
}

/**
 * Every error under `/sdapi/v1` in A1111's shapes, which its clients print or show as they are: `{"detail": [...]}`
 * (422) for a body they got wrong, `{"error", "detail", "body", "errors"}` for the rest, with the mesh's status and
 * headers (Retry-After, WWW-Authenticate). Never a 500 for a client's mistake: those are the mesh's 4xx.
 */
export function installA1111Errors(scope: FastifyInstance): void {
  scope.setErrorHandler((error: FastifyError, request, reply) => {
    const tooLarge = error.code === 'FST_ERR_CTP_BODY_TOO_LARGE';
    const mesh = tooLarge ? bodyTooLarge(request, reply, request.server.initialConfig.bodyLimit ?? 0) : meshErrorOf(error, request);
    if (mesh.status >= 500) reply.log.warn({ code: mesh.code }, mesh.message);
    if (!tooLarge) settleUnreadBody(request, reply);
    const { status, body } = a1111ErrorBody(mesh);
    void reply.code(status).headers(mesh.headers).type('application/json; charset=utf-8').send(body);
  });
  scope.setNotFoundHandler((request, reply) => {
    const mesh = new MeshError('ROUTE_NOT_FOUND', { method: request.method, url: (request.raw.url ?? '').split('?')[0]!.slice(0, 200) });
    void reply.code(404).type('application/json; charset=utf-8').send(a1111ErrorBody(mesh).body);
  });
}
