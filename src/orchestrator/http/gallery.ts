import type { FastifyInstance } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { ArtifactPage, GalleryView, RemovedResults } from '../../protocol/api/index.js';
import type { GalleryService } from '../gallery/gallery-service.js';
import { defaultAlbumOf } from '../jobs/index.js';
import { grantOf, type RequestAuth } from './auth.js';
import { errorAnswers, json } from './openapi.js';

export interface GalleryRouteDeps {
  gallery: GalleryService;
  auth: RequestAuth;
}

/**
 * The gallery's API (the page itself is served by http/pages.ts): what the page asks first (`/v1/gallery`: albums,
 * what the grant may do), the published results (`/v1/artifacts`), and deleting a job's results
 * (`/v1/jobs/:id/artifacts`). Thumbnails are a blob's (`/v1/blobs/:digest/thumbnail`, http/blobs.ts).
 */
export function galleryRoutes(app: FastifyInstance, deps: GalleryRouteDeps): void {
  const { gallery, auth } = deps;
  const routes = app.withTypeProvider<ZodTypeProvider>();

  routes.get('/v1/gallery', {
    schema: { tags: ['artifacts'], summary: 'What the gallery page needs first: the albums the grant may switch between, its default album, and whether it may submit and delete' },
    config: { openapi: { responses: { 200: json('The gallery for this grant', GalleryView), ...errorAnswers({}) } } },
    onRequest: auth.require('artifacts:read'),
  }, async (request) => {
    const grant = grantOf(request);
    return gallery.view(grant, auth.authorizer(request), defaultAlbumOf(grant));
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
    config: { openapi: { responses: { 200: json('A page of results; nextCursor asks for the next one', ArtifactPage), ...errorAnswers({ 400: 'A query parameter is invalid' }) } } },
    onRequest: auth.require('artifacts:read'),
  }, async (request) => gallery.artifacts(grantOf(request), request.query));

  routes.delete('/v1/jobs/:id/artifacts', {
    schema: {
      params: z.object({ id: z.string().min(1).max(100) }),
      tags: ['artifacts'],
      summary: "Delete a job's published results (artifacts:delete in the job's album): they leave the gallery and the job's view, and their bytes leave the store once nothing else names them (freed, freedBytes); the job stays",
    },
    config: { openapi: { responses: { 200: json('What was deleted, and what that freed', RemovedResults), ...errorAnswers({ 404: 'No such job that this grant may see' }) } } },
    onRequest: auth.require('artifacts:delete'),
  }, async (request) => gallery.remove(grantOf(request), request.params.id, auth.authorizer(request)));
}
