import type { FastifyInstance } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { MeshError } from '../../protocol/index.js';
import { artifactView, decodeCursor, encodeCursor } from '../jobs/index.js';
import { assertDigest } from '../registry/index.js';
import { artifacts, blobs, jobs as jobStore } from '../store/index.js';
import { grantOf, requireGrant } from './auth.js';
import type { HttpContext } from './context.js';

const MEDIA_TYPE = /^[a-z0-9][a-z0-9!#$&^_.+-]{0,63}\/[a-z0-9][a-z0-9!#$&^_.+-]{0,63}$/i;
const DigestParams = z.object({ digest: z.string().max(80) });

/** GET /v1/blobs/:digest, GET /v1/artifacts, PUT /v1/jobs/:id/outputs/:digest. */
export function blobRoutes(app: FastifyInstance, context: HttpContext): void {
  const routes = app.withTypeProvider<ZodTypeProvider>();

  routes.route({
    method: ['GET', 'HEAD'],
    url: '/v1/blobs/:digest',
    schema: { params: DigestParams, tags: ['blobs'], summary: 'The bytes of a blob, by digest (immutable)' },
    onRequest: requireGrant(context, 'blobs:read'),
    handler: async (request, reply) => {
      const digest = assertDigest(request.params.digest);
      const size = await context.blobs.size(digest);
      if (size === null) throw new MeshError('NOT_FOUND', { what: `Blob ${digest}` });
      const record = blobs.getBlob(context.db, digest);
      const etag = `"${digest}"`;
      void reply
        .header('etag', etag)
        .header('cache-control', 'private, max-age=31536000, immutable')
        .header('content-type', record?.mediaType ?? 'application/octet-stream');
      if (request.headers['if-none-match'] === etag) return reply.code(304).send();
      void reply.header('content-length', size);
      if (request.method === 'HEAD') return reply.send();
      return reply.send(context.blobs.open(digest));
    },
  });

  routes.get('/v1/artifacts', {
    schema: {
      querystring: z.object({
        limit: z.coerce.number().int().min(1).max(200).default(50),
        cursor: z.string().max(100).optional(),
        access_token: z.string().optional(),
      }),
      tags: ['artifacts'], summary: 'Published results the grant may see, newest first',
    },
    onRequest: requireGrant(context, 'artifacts:read'),
  }, async (request) => {
    const grant = grantOf(request);
    const records = artifacts.listArtifacts(context.db, {
      types: grant.types, models: grant.models, albums: grant.albums, limit: request.query.limit,
      beforeSeq: request.query.cursor ? decodeCursor(request.query.cursor) : undefined,
    });
    const last = records.at(-1);
    return {
      artifacts: records.map(artifactView),
      nextCursor: records.length === request.query.limit && last ? encodeCursor(last.seq) : null,
    };
  });

  // Uploads stream straight to disk, hashed on the way; they are never buffered whole.
  app.register(async (scope) => {
    scope.removeAllContentTypeParsers();
    scope.addContentTypeParser('*', (_request, _payload, done) => done(null));
    scope.withTypeProvider<ZodTypeProvider>().put('/v1/jobs/:id/outputs/:digest', {
      schema: {
        params: z.object({ id: z.string().min(1).max(100), digest: z.string().max(80) }),
        tags: ['blobs'], summary: "Upload one of a job's outputs (agents, with the job's upload grant)",
      },
      onRequest: requireGrant(context, 'outputs:write', (request) => ({ jobId: (request.params as { id: string }).id })),
    }, async (request, reply) => {
      const { id } = request.params;
      const digest = assertDigest(request.params.digest);
      const job = jobStore.getJob(context.db, id);
      if (!job) throw new MeshError('NOT_FOUND', { what: `Job ${id}` });
      const mediaType = request.headers['content-type'] ?? 'application/octet-stream';
      if (!MEDIA_TYPE.test(mediaType)) throw new MeshError('UNSUPPORTED_MEDIA_TYPE', { detail: mediaType.slice(0, 100) });
      const stored = await context.blobs.putStream(request.raw, { expected: digest, limit: context.config.server.uploadLimitBytes });
      const now = context.clock.now();
      context.commits.write(() => {
        blobs.recordBlob(context.db, { digest, bytes: stored.bytes, mediaType }, now);
        blobs.recordUpload(context.db, id, digest, now);
      });
      await context.commits.durable();
      void reply.code(201);
      return { digest, bytes: stored.bytes, mediaType };
    });
  });
}
