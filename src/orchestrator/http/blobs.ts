import type { FastifyInstance } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { MeshError } from '../../protocol/index.js';
import type { JobOutputs, JobService } from '../jobs/index.js';
import { assertDigest, type BlobStore } from '../registry/index.js';
import { grantOf, QUERY_GRANT_ALLOWED, type RequestAuth } from './auth.js';

const MEDIA_TYPE = /^[a-z0-9][a-z0-9!#$&^_.+-]{0,63}\/[a-z0-9][a-z0-9!#$&^_.+-]{0,63}$/i;
const DigestParams = z.object({ digest: z.string().max(80) });

export interface BlobRouteDeps {
  blobs: BlobStore;
  outputs: JobOutputs;
  jobs: JobService;
  auth: RequestAuth;
}

/** GET /v1/blobs/:digest, GET /v1/artifacts, PUT /v1/jobs/:id/outputs/:digest. */
export function blobRoutes(app: FastifyInstance, deps: BlobRouteDeps): void {
  const { blobs, outputs, jobs, auth } = deps;
  const routes = app.withTypeProvider<ZodTypeProvider>();

  routes.route({
    method: ['GET', 'HEAD'],
    url: '/v1/blobs/:digest',
    schema: { params: DigestParams, tags: ['blobs'], summary: 'The bytes of a blob, by digest (immutable)' },
    config: QUERY_GRANT_ALLOWED,
    // A grant limited to albums reads only the blobs published in them (see JobService.assertBlobVisible).
    preHandler: [auth.require('blobs:read'), async (request) => jobs.assertBlobVisible(grantOf(request), (request.params as { digest: string }).digest)],
    handler: async (request, reply) => {
      const digest = assertDigest(request.params.digest);
      const size = await blobs.size(digest);
      if (size === null) throw new MeshError('NOT_FOUND', { what: `Blob ${digest}` });
      const etag = `"${digest}"`;
      void reply
        .header('etag', etag)
        .header('cache-control', 'private, max-age=31536000, immutable')
        .header('content-type', outputs.mediaType(digest) ?? 'application/octet-stream');
      if (request.headers['if-none-match'] === etag) return reply.code(304).send();
      void reply.header('content-length', size);
      if (request.method === 'HEAD') return reply.send();
      return reply.send(blobs.open(digest));
    },
  });

  routes.get('/v1/artifacts', {
    schema: {
      querystring: z.object({
        limit: z.coerce.number().int().min(1).max(200).default(50),
        cursor: z.string().max(100).optional(),
      }),
      tags: ['artifacts'], summary: 'Published results the grant may see, newest first',
    },
    preHandler: auth.require('artifacts:read'),
  }, async (request) => jobs.artifacts(grantOf(request), request.query));

  // Uploads stream straight to disk, hashed on the way; they are never buffered whole.
  app.register(async (scope) => {
    scope.removeAllContentTypeParsers();
    scope.addContentTypeParser('*', (_request, _payload, done) => done(null));
    scope.withTypeProvider<ZodTypeProvider>().put('/v1/jobs/:id/outputs/:digest', {
      schema: {
        params: z.object({ id: z.string().min(1).max(100), digest: z.string().max(80) }),
        tags: ['blobs'], summary: "Upload one of a job's outputs (agents, with the job's upload grant)",
      },
      preHandler: auth.require('outputs:write', (request) => ({ jobId: (request.params as { id: string }).id })),
    }, async (request, reply) => {
      const digest = assertDigest(request.params.digest);
      const mediaType = request.headers['content-type'] ?? 'application/octet-stream';
      if (!MEDIA_TYPE.test(mediaType)) throw new MeshError('UNSUPPORTED_MEDIA_TYPE', { detail: mediaType.slice(0, 100) });
      const stored = await outputs.receive(request.params.id, digest, mediaType, request.raw);
      void reply.code(201);
      return stored;
    });
  });
}
