import type { FastifyInstance } from 'fastify';
import fastifyStatic from '@fastify/static';
import type { HttpContext } from './context.js';

/** The gallery page and its assets, from web/. The page itself needs no grant; everything it fetches does. */
export async function galleryRoutes(app: FastifyInstance, context: HttpContext): Promise<void> {
  await app.register(fastifyStatic, { root: context.webRoot, prefix: '/web/', index: false, cacheControl: true, maxAge: 0 });
  app.get('/', { schema: { hide: true } }, (_request, reply) => reply.sendFile('index.html'));
}
