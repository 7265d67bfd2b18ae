import type { FastifyError, FastifyInstance } from 'fastify';
import { hasZodFastifySchemaValidationErrors } from 'fastify-type-provider-zod';
import { MeshError } from '../../protocol/index.js';

/** Largest refused body read to its end (and discarded) so the 413 reaches the client. */
const DRAIN_LIMIT_BYTES = 64 * 1024 * 1024;

/** Fastify's own error codes for client mistakes, mapped to ours. */
const FASTIFY_CLIENT_ERRORS: Record<string, (error: FastifyError) => MeshError> = {
  FST_ERR_CTP_INVALID_MEDIA_TYPE: (error) => new MeshError('UNSUPPORTED_MEDIA_TYPE', { detail: error.message }),
  FST_ERR_CTP_EMPTY_JSON_BODY: () => new MeshError('BAD_REQUEST', { detail: 'the JSON body is empty' }),
  FST_ERR_CTP_INVALID_JSON_BODY: (error) => new MeshError('BAD_REQUEST', { detail: `the body is not valid JSON (${error.message})` }),
  FST_ERR_CTP_INVALID_CONTENT_LENGTH: () => new MeshError('BAD_REQUEST', { detail: 'Content-Length does not match the body' }),
  FST_ERR_VALIDATION: (error) => new MeshError('VALIDATION_FAILED', { detail: error.message }),
};

/**
 * One place that turns every thrown error into `{ error: { code, message } }`:
 * ours carry their status; Fastify's and zod's client errors become 4xx;
 * anything else is a 500 and is logged, because it is our bug.
 */
export function installErrorHandling(app: FastifyInstance, bodyLimitBytes: number): void {
  app.setErrorHandler((error: FastifyError, request, reply) => {
    let mesh: MeshError;
    if (error instanceof MeshError) {
      mesh = error;
    } else if (hasZodFastifySchemaValidationErrors(error)) {
      const detail = error.validation
        .map((issue) => `${issue.instancePath ? issue.instancePath.slice(1).replaceAll('/', '.') : error.validationContext ?? 'body'}: ${issue.message}`)
        .join('; ');
      mesh = new MeshError('VALIDATION_FAILED', { detail });
    } else if (error.code === 'FST_ERR_CTP_BODY_TOO_LARGE') {
      mesh = new MeshError('PAYLOAD_TOO_LARGE', { limit: bodyLimitBytes });
      // Fastify closes the connection here; closing with the body still arriving makes the kernel
      // send a reset that can destroy the 413 before the client reads it. For bodies of a sane size,
      // keep the connection and let Node discard the rest, so the client always sees the answer.
      if (Number(request.headers['content-length'] ?? Infinity) <= DRAIN_LIMIT_BYTES) reply.removeHeader('connection');
    } else if (error.code && FASTIFY_CLIENT_ERRORS[error.code]) {
      mesh = FASTIFY_CLIENT_ERRORS[error.code]!(error);
    } else if (error instanceof SyntaxError) {
      mesh = new MeshError('BAD_REQUEST', { detail: `the body is not valid JSON (${error.message})` });
    } else if (typeof error.statusCode === 'number' && error.statusCode >= 400 && error.statusCode < 500) {
      mesh = new MeshError('BAD_REQUEST', { detail: error.message });
    } else {
      request.log.error({ err: error }, 'unhandled error');
      mesh = new MeshError('INTERNAL', { detail: 'see the orchestrator log' }, { cause: error });
    }
    if (mesh.status >= 500) request.log.warn({ code: mesh.code }, mesh.message);
    void reply.code(mesh.status).headers(mesh.headers).send({ error: mesh.toJSON() });
  });
  app.setNotFoundHandler((request, reply) => {
    const mesh = new MeshError('ROUTE_NOT_FOUND', { method: request.method, url: request.url.split('?')[0] });
    void reply.code(404).send({ error: mesh.toJSON() });
  });
}
