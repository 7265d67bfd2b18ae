import type { Readable } from 'node:stream';
import type { FastifyInstance } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { MeshError } from '../../protocol/index.js';
import type { JobOutputs, JobService } from '../jobs/index.js';
import { assertDigest } from '../../protocol/index.js';
import { type BlobReader } from '../blobs/blob-reader.js';
import type { BlobStore } from '../blobs/blob-store.js';
import { servedAs } from '../blobs/output-media.js';
import { grantOf, QUERY_GRANT_ALLOWED, type RequestAuth } from './auth.js';
import { ArtifactPageSchema, bytesOf, errorAnswers, json } from './answers.js';
import { BINARY, errorResponses, MeshErrorBody, StoredBlobBody } from './openapi.js';
import { noneMatch, parseRange, rangeStillApplies } from './ranges.js';

const MEDIA_TYPE = /^[a-z0-9][a-z0-9!#$&^_.+-]{0,63}\/[a-z0-9][a-z0-9!#$&^_.+-]{0,63}$/i;
const DigestParams = z.object({ digest: z.string().max(80) });

/**
 * Headers that keep a blob from scripting the orchestrator's origin, whatever its bytes: the browser may not sniff
 * another type, a blob opened as a page runs nothing and loads nothing (sandboxed: an opaque origin, no scripts — a
 * CSP on an image or a video does not apply where an <img> or a <video> embeds it), and only image and video types
 * on the outputs' lists (registry/output-media.ts) are shown inline; everything else is a download, and a type on
 * no list is application/octet-stream.
 */
function blobHeaders(digest: string, mediaType: string | undefined): Record<string, string> {
  const served = servedAs(mediaType);
  const filename = `${digest.slice('sha256:'.length, 'sha256:'.length + 16)}.${served.extension}`;
  return {
    'content-type': served.contentType,
    'content-disposition': `${served.inline ? 'inline' : 'attachment'}; filename="${filename}"`,
    'x-content-type-options': 'nosniff',
    'content-security-policy': "default-src 'none'; sandbox",
  };
}

/** The headers of a blob's answer, for the document. */
const BLOB_HEADERS = {
  ETag: { description: '"<digest>"', schema: { type: 'string' } },
  'Cache-Control': { description: 'private, max-age=31536000, immutable', schema: { type: 'string' } },
  'Content-Security-Policy': { description: "default-src 'none'; sandbox", schema: { type: 'string' } },
};

/** A header Node does not know (If-Range) may arrive as a list; the first is the one that counts. */
const firstOf = (value: string | string[] | undefined): string | undefined => (Array.isArray(value) ? value[0] : value);

export interface BlobRouteDeps {
  reader: BlobReader;
  /** Where blobs live: a store that offers presigned GETs (a bucket with `blobs.presign`) sends clients there. */
  blobStore: Pick<BlobStore, 'presignedGet'>;
  outputs: JobOutputs;
  jobs: JobService;
  auth: RequestAuth;
}

/** GET|HEAD /v1/blobs/:digest, GET /v1/artifacts, PUT /v1/jobs/:id/outputs/:digest. */
export function blobRoutes(app: FastifyInstance, deps: BlobRouteDeps): void {
  const { reader, outputs, jobs, auth, blobStore } = deps;
  const routes = app.withTypeProvider<ZodTypeProvider>();

  routes.route({
    method: ['GET', 'HEAD'],
    url: '/v1/blobs/:digest',
    schema: { params: DigestParams, tags: ['blobs'], summary: 'The bytes of a blob, by digest (immutable, verified, byte ranges)' },
    config: {
      ...QUERY_GRANT_ALLOWED,
      openapi: {
        responses: {
          200: { ...bytesOf('The bytes, verified against the digest; served with the media type they were stored with (or as a download), never able to script this origin', ['*/*']), headers: BLOB_HEADERS },
          206: { ...bytesOf('The range asked for (Range: bytes=…)', ['*/*']), headers: { 'Content-Range': { description: 'bytes start-end/size', schema: { type: 'string' } } } },
          304: { description: 'If-None-Match matched: the digest names the same bytes for ever' },
          307: { description: 'Read it from the bucket: a presigned GET (blobs.presign), for a client GET without a range', headers: { Location: { description: 'the presigned URL', schema: { type: 'string' } } } },
          ...errorResponses(MeshErrorBody, {
            400: 'Not a digest', 401: 'No grant, or one that is not valid', 403: 'The grant does not allow blobs:read',
            404: 'No such blob that this grant may read', 416: 'The range is outside the blob', 502: 'The stored bytes failed their check (quarantined)',
          }),
        },
      },
    },
    onRequest: auth.require('blobs:read'),
    // A grant limited to albums reads only the blobs published in them (see JobService.assertBlobVisible).
    preHandler: async (request) => jobs.assertBlobVisible(grantOf(request), (request.params as { digest: string }).digest),
    handler: async (request, reply) => {
      const digest = assertDigest(request.params.digest);
      const record = await outputs.blobRecord(digest);
      // A bucket that presigns: the client reads from the bucket's origin (agents, which verify and may not follow a
      // redirect on a pinned connection, and HEAD and ranges stay here).
      if (blobStore.presignedGet && request.method === 'GET' && !request.headers.range && grantOf(request).kind !== 'agent') {
        const headers = blobHeaders(digest, record?.mediaType);
        const location = await blobStore.presignedGet(digest, { contentType: headers['content-type']!, contentDisposition: headers['content-disposition']! });
        return reply.code(307).header('location', location).header('cache-control', 'private, no-store').send();
      }
      const blob = await reader.open(digest, record?.bytes ?? null);
      let body: Readable | null = null;
      try {
        const etag = `"${digest}"`;
        // Set only once the answer is known to be the blob: an error must not carry its validators or an immutable Cache-Control.
        const representation = {
          etag, 'accept-ranges': 'bytes',
          'cache-control': 'private, max-age=31536000, immutable',
          ...blobHeaders(digest, record?.mediaType),
        };
        if (noneMatch(request.headers['if-none-match'], etag)) return reply.code(304).headers(representation).send();
        const answer = rangeStillApplies(firstOf(request.headers['if-range']), etag) ? parseRange(request.headers.range, blob.size) : { kind: 'whole' as const };
        if (answer.kind === 'unsatisfiable') {
          throw new MeshError('RANGE_NOT_SATISFIABLE', { range: request.headers.range!.slice(0, 100), size: blob.size }, { headers: { 'content-range': `bytes */${blob.size}` } });
        }
        const range = answer.kind === 'partial' ? answer.range : undefined;
        // HEAD reads no bytes: it gets the size check of open(), not a hash.
        if (request.method !== 'HEAD') body = await blob.read(range);
        void reply.headers(representation);
        if (range) {
          void reply.code(206).header('content-range', `bytes ${range.start}-${range.end}/${blob.size}`).header('content-length', range.end - range.start + 1);
        } else {
          void reply.header('content-length', blob.size);
        }
        return reply.send(body ?? undefined);
      } finally {
        if (!body) await blob.close();
      }
    },
  });

  routes.get('/v1/artifacts', {
    schema: {
      querystring: z.object({
        limit: z.coerce.number().int().min(1).max(200).default(50),
        cursor: z.string().max(100).optional(),
        /** One album (of those the grant may see). */
        album: z.string().regex(/^[a-z0-9][a-z0-9_-]{0,62}$/i).optional(),
        /** Prompts holding this text. */
        q: z.string().trim().max(200).optional(),
      }),
      tags: ['artifacts'], summary: 'Published results the grant may see, newest first (keyset pages: nextCursor), optionally of one album or with prompts holding q',
    },
    config: { openapi: { responses: { 200: json('A page of results; nextCursor asks for the next one', ArtifactPageSchema), ...errorAnswers({ 400: 'A query parameter is invalid' }) } } },
    onRequest: auth.require('artifacts:read'),
  }, async (request) => jobs.artifacts(grantOf(request), request.query));

  // Uploads stream straight to disk, hashed on the way; they are never buffered whole.
  app.register(async (scope) => {
    scope.removeAllContentTypeParsers();
    scope.addContentTypeParser('*', (_request, _payload, done) => done(null));
    scope.withTypeProvider<ZodTypeProvider>().put('/v1/jobs/:id/outputs/:digest', {
      schema: {
        params: z.object({ id: z.string().min(1).max(100), digest: z.string().max(80) }),
        tags: ['blobs'], summary: "Upload one of a job's outputs (agents, with the upload credential of the job's batch)",
      },
      config: {
        openapi: {
          body: { '*/*': { ...BINARY, description: 'The output\'s bytes, streamed to disk and hashed on the way; Content-Type is its media type (image/png, video/mp4, application/json, …), which the job type must be able to produce and the bytes must be' } },
          responses: {
            201: { description: 'The output, stored by digest', content: { 'application/json': StoredBlobBody } },
            ...errorResponses(MeshErrorBody, {
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
