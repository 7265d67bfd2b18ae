import type { FastifyInstance } from 'fastify';
import { z } from 'zod';
import { ErrorEnvelope, StoredBlob } from '../../protocol/api/index.js';
import { assertDigest, MeshError } from '../../protocol/index.js';
import type { JobOutputs } from '../jobs/index.js';
import type { RequestAuth } from './auth.js';
import { BINARY, errorResponses } from './openapi.js';
import { withRawBodies } from './raw-bodies.js';

const MEDIA_TYPE = /^[a-z0-9][a-z0-9!#$&^_.+-]{0,63}\/[a-z0-9][a-z0-9!#$&^_.+-]{0,63}$/i;

/**
 * `PUT /v1/jobs/:id/outputs/:digest`: an agent uploads one of a job's outputs with its batch's upload credential,
 * streamed to disk and hashed on the way (small outputs travel inline in the agent's `done` instead).
 */
export function outputRoutes(app: FastifyInstance, deps: { outputs: JobOutputs; auth: RequestAuth }): void {
  const { outputs, auth } = deps;
  withRawBodies(app, (raw) => {
    raw.put('/v1/jobs/:id/outputs/:digest', {
      schema: {
        params: z.object({ id: z.string().min(1).max(100), digest: z.string().max(80) }),
        tags: ['blobs'], summary: "Upload one of a job's outputs (agents, with the upload credential of the job's batch)",
      },
      config: {
        openapi: {
          body: { '*/*': { ...BINARY, description: 'The output\'s bytes, streamed to disk and hashed on the way; Content-Type is its media type (image/png, video/mp4, application/json, …), which the job type must be able to produce and the bytes must be' } },
          responses: {
            201: { description: 'The output, stored by digest', content: { 'application/json': StoredBlob } },
            ...errorResponses(ErrorEnvelope, {
              400: 'Not a digest, or the bytes hash to another (DIGEST_MISMATCH)', 401: 'No upload credential, or one that is not valid',
              403: 'The job is not running in the credential\'s batch', 404: 'No such job', 413: 'The output is larger than the limit',
              415: 'A media type the job may not produce, or bytes that are not of it',
            }),
          },
        },
      },
      onRequest: auth.requireUpload(),
    }, async (request, reply) => {
      const digest = assertDigest(request.params.digest);
      const mediaType = request.headers['content-type'] ?? 'application/octet-stream';
      if (!MEDIA_TYPE.test(mediaType)) throw new MeshError('UNSUPPORTED_MEDIA_TYPE', { detail: mediaType.slice(0, 100) });
      const stored = await outputs.receive({ jobId: request.params.id, batchId: request.uploadBatch!, digest, mediaType }, request.raw);
      void reply.code(201);
      return stored;
  });
  });
}
