import type { Readable } from 'node:stream';
import type { FastifyInstance } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { ErrorEnvelope, ForgottenBlob, StoredBlob } from '../../protocol/api/index.js';
import { assertDigest, MeshError } from '../../protocol/index.js';
import type { BlobReader } from '../blobs/blob-reader.js';
import type { BlobStore } from '../blobs/blob-store.js';
import type { ClientBlobs } from '../blobs/client-blobs.js';
import { servedAs } from '../blobs/output-media.js';
import { THUMBNAIL_WIDTHS, type Thumbnails, type ThumbnailWidth } from '../gallery/thumbnails.js';
import type { BlobVisibility, JobOutputs } from '../jobs/index.js';
import { grantOf, QUERY_GRANT_ALLOWED, type RequestAuth } from './auth.js';
import { BINARY, bytesOf, errorAnswers, errorResponses, grantErrors } from './openapi.js';
import { noneMatch, parseRange, rangeStillApplies } from './ranges.js';
import { withRawBodies } from './raw-bodies.js';

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
  /** What the store knows of a blob (its size and media type). */
  outputs: JobOutputs;
  visibility: Pick<BlobVisibility, 'assertVisible'>;
  clientBlobs: ClientBlobs;
  thumbnails: Thumbnails;
  auth: RequestAuth;
}

/**
 * `/v1/blobs`: a blob's bytes by digest (verified, ranges, presigned where the bucket offers it) and its thumbnail;
 * a client's file stored in one request (`PUT`, streamed to disk and hashed on the way, never buffered whole) and
 * deleted. Larger files go through a resumable upload (http/uploads.ts).
 */
export function blobRoutes(app: FastifyInstance, deps: BlobRouteDeps): void {
  const { reader, outputs, visibility, clientBlobs, thumbnails, auth, blobStore } = deps;
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
          ...errorResponses(ErrorEnvelope, {
            400: 'Not a digest', ...grantErrors('blobs:read'),
            404: 'No such blob that this grant may read', 416: 'The range is outside the blob', 502: 'The stored bytes failed their check (quarantined)',
          }),
        },
      },
    },
    onRequest: auth.require('blobs:read'),
    // A grant limited to albums reads only the blobs published in them (see BlobVisibility).
    preHandler: async (request) => visibility.assertVisible(grantOf(request), (request.params as { digest: string }).digest),
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

  routes.get('/v1/blobs/:digest/thumbnail', {
    schema: {
      params: z.object({ digest: z.string().max(80) }),
      querystring: z.object({ width: z.coerce.number().int().refine((width) => (THUMBNAIL_WIDTHS as readonly number[]).includes(width), `one of ${THUMBNAIL_WIDTHS.join(', ')}`).default(512) }),
      tags: ['blobs'], summary: `A published picture shrunk to fit a square of width (${THUMBNAIL_WIDTHS.join(', ')}; never enlarged), as WebP: made once, kept by digest`,
    },
    config: {
      ...QUERY_GRANT_ALLOWED,
      openapi: { responses: { 200: bytesOf('The thumbnail', ['image/webp']), ...errorAnswers({ 400: 'Not a digest, or a width not on the list', 404: 'No such picture that this grant may read' }) } },
    },
    onRequest: auth.require('blobs:read'),
    preHandler: async (request) => visibility.assertVisible(grantOf(request), (request.params as { digest: string }).digest),
  }, async (request, reply) => {
    const digest = assertDigest(request.params.digest);
    const bytes = await thumbnails.get(digest, request.query.width as ThumbnailWidth);
    void reply.headers({
      'content-type': 'image/webp',
      'cache-control': 'private, max-age=31536000, immutable',
      'x-content-type-options': 'nosniff',
      'content-security-policy': "default-src 'none'; sandbox",
    });
    return reply.send(bytes);
  });

  withRawBodies(app, (raw) => {
    raw.put('/v1/blobs', {
      schema: {
        tags: ['blobs'],
        summary: 'Store a file by digest in one request (an image a job starts from, …): {digest, bytes, mediaType}, the type as its bytes say. A picture (PNG, JPEG, WebP) is decoded under limits first: a bomb, a truncated or polyglot file, or one whose Content-Type or Content-Disposition filename disagrees with its bytes is 400 IMAGE_REFUSED. Jobs of the same grant lineage may name it as an input',
      },
      config: {
        openapi: {
          body: Object.fromEntries(['application/octet-stream', 'image/png', 'image/jpeg', 'image/webp'].map((type) => [type, {
            ...BINARY, description: 'The file, streamed to disk and hashed on the way. Any Content-Type is taken; a picture\'s (and a Content-Disposition filename\'s) must agree with its bytes',
          }])),
          headers: z.object({ 'Content-Disposition': z.string().optional().describe('attachment; filename="…": a picture\'s name must agree with its bytes') }),
          responses: {
            201: { description: 'The file, stored by digest (the type as its bytes say)', content: { 'application/json': StoredBlob } },
            ...errorResponses(ErrorEnvelope, {
              400: 'A picture that is not one gpumesh will decode, or whose Content-Type or filename disagrees with its bytes (IMAGE_REFUSED)',
              ...grantErrors('blobs:write'), 413: 'The file is larger than the upload limit', 507: 'The data folder\'s disk is full or below its floor (STORAGE_FULL)',
            }),
          },
        },
      },
      onRequest: auth.require('blobs:write'),
    }, async (request, reply) => {
      // What the client says the file is must agree with its bytes when it is a picture (a .png that is a JPEG is refused).
      const disposition = request.headers['content-disposition']?.match(/filename="?([^";]+)"?/i)?.[1];
      const declared = { mediaType: request.headers['content-type'], ...(disposition ? { filename: disposition } : {}) };
      const stored = await clientBlobs.put(grantOf(request).id, request.raw, declared);
      void reply.code(201);
      return stored;
    });
  });

  routes.delete('/v1/blobs/:digest', {
    schema: {
      params: z.object({ digest: z.string().max(80) }),
      tags: ['blobs'],
      summary: 'Delete a file this grant lineage stored (PUT /v1/blobs, an upload): its jobs may no longer name it, and its bytes leave the store once nothing else names them (another lineage\'s copy, a job that took it as input, a result of the same bytes). Answers {digest, freed, freedBytes}',
    },
    config: {
      openapi: {
        responses: {
          200: { description: 'The lineage\'s record is gone; `freed` says whether the bytes went too', content: { 'application/json': ForgottenBlob } },
          ...errorResponses(ErrorEnvelope, { 400: 'Not a digest', ...grantErrors('blobs:write'), 404: 'This grant lineage stored no such file' }),
        },
      },
    },
    onRequest: auth.require('blobs:write'),
  }, async (request) => {
    const digest = assertDigest(request.params.digest);
    const { freedBytes, freed } = await clientBlobs.forget(grantOf(request).id, digest);
    return { digest, freed: freed.length > 0, freedBytes };
  });
}
