import type { FastifyInstance } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { assertDigest } from '../../protocol/index.js';
import type { GalleryService } from '../gallery/gallery-service.js';
import { THUMBNAIL_WIDTHS, type Thumbnails, type ThumbnailWidth } from '../gallery/thumbnails.js';
import { defaultAlbumOf, type JobService } from '../jobs/index.js';
import { bytesOf, errorAnswers, GalleryViewSchema, json, RemovedResultsSchema } from './answers.js';
import { grantOf, QUERY_GRANT_ALLOWED, type RequestAuth } from './auth.js';
import { pageRoutes } from './pages.js';

export interface GalleryRouteDeps {
  webRoot: string;
  gallery: GalleryService;
  thumbnails: Thumbnails;
  jobs: JobService;
  auth: RequestAuth;
}

/**
 * The gallery page, the mesh view (`/mesh`) and their assets, from web/, and the gallery's own API: what the page
 * asks first (albums, what the grant may do), thumbnails, and deleting a job's results. The pages themselves need no
 * grant; everything they fetch does (the gallery's grant and the mesh view's are different ones).
 */
export async function galleryRoutes(app: FastifyInstance, deps: GalleryRouteDeps): Promise<void> {
  const { gallery, thumbnails, jobs, auth } = deps;
  const routes = app.withTypeProvider<ZodTypeProvider>();

  routes.get('/v1/gallery', {
    schema: { tags: ['artifacts'], summary: 'What the gallery page needs first: the albums the grant may switch between, its default album, and whether it may submit and delete' },
    config: { openapi: { responses: { 200: json('The gallery for this grant', GalleryViewSchema), ...errorAnswers({}) } } },
    onRequest: auth.require('artifacts:read'),
  }, async (request) => {
    const grant = grantOf(request);
    return gallery.view(grant, auth.authorizer(request), defaultAlbumOf(grant));
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
    preHandler: async (request) => jobs.assertBlobVisible(grantOf(request), (request.params as { digest: string }).digest),
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

  routes.delete('/v1/jobs/:id/artifacts', {
    schema: {
      params: z.object({ id: z.string().min(1).max(100) }),
      tags: ['artifacts'],
      summary: "Delete a job's published results (artifacts:delete in the job's album): they leave the gallery and the job's view, and their bytes leave the store once nothing else names them (freed, freedBytes); the job stays",
    },
    config: { openapi: { responses: { 200: json('What was deleted, and what that freed', RemovedResultsSchema), ...errorAnswers({ 404: 'No such job that this grant may see' }) } } },
    onRequest: auth.require('artifacts:delete'),
  }, async (request) => ({ jobId: request.params.id, ...await gallery.remove(grantOf(request), request.params.id, auth.authorizer(request)) }));

  await pageRoutes(app, deps.webRoot);
}
