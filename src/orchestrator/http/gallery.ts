import type { FastifyInstance } from 'fastify';
import fastifyStatic from '@fastify/static';

/**
 * The gallery page, the mesh view (`/mesh`) and their assets, from web/. The pages themselves need no grant;
 * everything they fetch does (the gallery's grant and the mesh view's are different ones).
 */
export async function galleryRoutes(app: FastifyInstance, deps: { webRoot: string }): Promise<void> {
  await app.register(fastifyStatic, { root: deps.webRoot, prefix: '/web/', index: false, cacheControl: true, maxAge: 0 });
  app.get('/', { schema: { hide: true } }, (_request, reply) => reply.sendFile('index.html'));
  app.get('/mesh', { schema: { hide: true } }, (_request, reply) => reply.sendFile('mesh.html'));
}
