import type { FastifyBaseLogger, FastifyInstance, RawReplyDefaultExpression, RawRequestDefaultExpression, RawServerDefault } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';

/** Routes added with zod schemas (params, querystring, body validated and typed). */
export type ZodRoutes = FastifyInstance<RawServerDefault, RawRequestDefaultExpression, RawReplyDefaultExpression, FastifyBaseLogger, ZodTypeProvider>;

/**
 * Routes whose bodies stream to disk, hashed on the way (uploads, agents' outputs): no parser reads them, let alone
 * whole; each route reads `request.raw` itself.
 */
export function withRawBodies(app: FastifyInstance, add: (routes: ZodRoutes) => void): void {
  app.register(async (scope) => {
    scope.removeAllContentTypeParsers();
    scope.addContentTypeParser('*', (_request, _payload, done) => done(null));
    add(scope.withTypeProvider<ZodTypeProvider>());
  });
}
