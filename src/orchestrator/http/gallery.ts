import type { FastifyInstance } from 'fastify';
import fastifyStatic from '@fastify/static';

/** The gallery page and its assets, from web/. The page itself needs no grant; everything it fetches does. */
export async function galleryRoutes(app: FastifyInstance, deps: { webRoot: string }): Promise<void> {
  await app.register(fastifyStatic, { root: deps.webRoot, prefix: '/web/', index: false, cacheControl: true, maxAge: 0 });
  app.get('/', { schema: { hide: true } }, (_request, reply) => reply.sendFile('index.html'));
}
