import type { FastifyInstance, FastifyReply } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { ErrorEnvelope, StoredBlob, UploadView } from '../../protocol/api/index.js';
import { MeshError } from '../../protocol/index.js';
import type { ClientBlobs } from '../blobs/client-blobs.js';
import type { StagedUploads, UploadState } from '../blobs/staged-uploads.js';
import { grantOf, type RequestAuth } from './auth.js';
import { BINARY, errorResponses, grantErrors, type DocResponse } from './openapi.js';
import { withRawBodies } from './raw-bodies.js';

export interface UploadRouteDeps {
  uploads: StagedUploads;
  clientBlobs: ClientBlobs;
  auth: RequestAuth;
}

const UploadParams = z.object({ id: z.string().min(1).max(100) });
const OFFSET_HEADER = 'upload-offset';

const OFFSET_ANSWER = { 'Upload-Offset': { description: 'The offset reached (as `offset`)', schema: { type: 'integer', minimum: 0 } } };
const uploadAnswer = (status: number, description: string): Record<number, DocResponse> =>
  ({ [status]: { description, content: { 'application/json': UploadView }, headers: OFFSET_ANSWER } });
const GRANT_ERRORS = grantErrors('blobs:write');
/** A 409 UPLOAD_CONFLICT, with the offset to resume from in `details.offset` and in `Upload-Offset`. */
const conflictAnswer = (description: string): Record<number, DocResponse> => ({
  409: {
    description, content: { 'application/json': ErrorEnvelope },
    headers: { 'Upload-Offset': { description: 'The offset to resume from (as `details.offset`)', schema: { type: 'integer', minimum: 0 } } },
  },
});

/** The state in the answer and in `Upload-Offset` (the header tus clients read). */
function answer(reply: FastifyReply, state: UploadState): UploadView {
  void reply.header(OFFSET_HEADER, String(state.offset));
  return { ...state, url: `/v1/uploads/${state.id}` };
}

/**
 * `/v1/uploads`: a resumable upload, for a large file (a model): `POST /v1/uploads` → `PATCH /v1/uploads/:id` (chunks,
 * each at the `Upload-Offset` reached) → `POST /v1/uploads/:id/complete`, which stores it by digest. Bodies stream to
 * disk, hashed on the way; none is ever buffered whole. `blobs:write`. (A file in one request: `PUT /v1/blobs`.)
 */
export function uploadRoutes(app: FastifyInstance, deps: UploadRouteDeps): void {
  const { uploads, clientBlobs, auth } = deps;
  const routes = app.withTypeProvider<ZodTypeProvider>();

  routes.post('/v1/uploads', {
    schema: {
      body: z.strictObject({ bytes: z.int().min(0).optional() }).optional(), tags: ['blobs'],
      summary: 'Start a resumable upload (a large file, e.g. a model); `bytes`: its size, if known. Answers its id and offset 0',
    },
    config: {
      openapi: {
        responses: {
          ...uploadAnswer(201, 'The upload, at offset 0'),
          ...errorResponses(ErrorEnvelope, {
            400: 'The body is not the shape above', ...GRANT_ERRORS, 413: '`bytes` is over the upload limit',
            429: 'The grant lineage has uploads.maxOpenPerGrant uploads open: complete or delete one first (TOO_MANY_UPLOADS, Retry-After)',
            507: 'The data folder\'s disk is full or below its floor (STORAGE_FULL)',
          }),
        },
      },
    },
    onRequest: auth.require('blobs:write'),
  }, async (request, reply) => {
    void reply.code(201);
    return answer(reply, await uploads.create(grantOf(request).id, request.body?.bytes ?? null));
  });

  routes.route({
    method: ['GET', 'HEAD'], url: '/v1/uploads/:id',
    schema: { params: UploadParams, tags: ['blobs'], summary: 'Where a resumable upload stands: the offset to send the next chunk from (also in Upload-Offset)' },
    config: { openapi: { responses: { ...uploadAnswer(200, 'Where it stands'), ...errorResponses(ErrorEnvelope, { ...GRANT_ERRORS, 404: 'No such upload of this grant lineage' }) } } },
    onRequest: auth.require('blobs:write'),
    handler: async (request, reply) => answer(reply, await uploads.state(request.params.id, grantOf(request).id)),
  });

  routes.delete('/v1/uploads/:id', {
    schema: { params: UploadParams, tags: ['blobs'], summary: 'Give a resumable upload up: its bytes are deleted' },
    config: {
      openapi: {
        responses: {
          204: { description: 'Given up' }, ...errorResponses(ErrorEnvelope, { ...GRANT_ERRORS, 404: 'No such upload of this grant lineage' }),
          ...conflictAnswer('A chunk of it is being received, or it is being completed (UPLOAD_CONFLICT)'),
        },
      },
    },
    onRequest: auth.require('blobs:write'),
  }, async (request, reply) => {
    await uploads.abort(request.params.id, grantOf(request).id);
    return reply.code(204).send();
  });

  routes.post('/v1/uploads/:id/complete', {
    schema: { params: UploadParams, tags: ['blobs'], summary: 'Finish a resumable upload: its bytes become a blob, by digest (deduplicated). Answers {digest, bytes, mediaType}' },
    config: {
      openapi: {
        responses: {
          200: { description: 'The file, stored by digest', content: { 'application/json': StoredBlob } },
          ...errorResponses(ErrorEnvelope, {
            400: 'A picture that is not one gpumesh will decode (IMAGE_REFUSED)', ...GRANT_ERRORS,
            404: 'No upload of that id started by this grant', 507: 'The data folder\'s disk is full or below its floor (STORAGE_FULL)',
          }),
          ...conflictAnswer('Fewer bytes than the size given at the start, or a chunk or a DELETE of it under way (UPLOAD_CONFLICT)'),
        },
      },
    },
    onRequest: auth.require('blobs:write'),
  }, async (request) => {
    const grant = grantOf(request);
    // Judged before it is stored: bytes refused (a picture that does not decode) are never kept, and the upload goes.
    return uploads.complete(request.params.id, grant.id, (file) => clientBlobs.take(grant.id, file));
  });

  withRawBodies(app, (raw) => {
    raw.patch('/v1/uploads/:id', {
      schema: {
        params: UploadParams, tags: ['blobs'],
        summary: 'Append a chunk to a resumable upload; `Upload-Offset` must be where the upload stands (409 UPLOAD_CONFLICT names it otherwise)',
      },
      config: {
        openapi: {
          body: { 'application/octet-stream': { ...BINARY, description: 'The next bytes of the file, streamed to disk (any Content-Type: the bytes are taken as they are)' } },
          headers: z.object({ 'Upload-Offset': z.string().regex(/^\d{1,15}$/).describe('Where this chunk starts: the offset the upload has reached (GET /v1/uploads/:id)') }),
          responses: {
            ...uploadAnswer(200, 'The chunk is in: the offset reached'),
            ...errorResponses(ErrorEnvelope, {
              400: 'No Upload-Offset, or not a number', ...GRANT_ERRORS, 404: 'No upload of that id started by this grant',
              413: 'More bytes than the size given at the start, or than the upload limit', 507: 'The data folder\'s disk is full or below its floor (STORAGE_FULL)',
            }),
            ...conflictAnswer('Upload-Offset is not where the upload stands, or another chunk, its completion or a DELETE is under way (UPLOAD_CONFLICT)'),
          },
        },
      },
      onRequest: auth.require('blobs:write'),
    }, async (request, reply) => {
      const header = request.headers[OFFSET_HEADER];
      const offset = typeof header === 'string' && /^\d{1,15}$/.test(header) ? Number(header) : NaN;
      if (!Number.isSafeInteger(offset)) throw new MeshError('BAD_REQUEST', { detail: 'send the chunk\'s offset in the Upload-Offset header (the offset GET /v1/uploads/:id answers)' });
      return answer(reply, await uploads.append(request.params.id, grantOf(request).id, offset, request.raw));
    });
  });
}
