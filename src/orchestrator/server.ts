import fastifySwagger from '@fastify/swagger';
import fastifyWebsocket from '@fastify/websocket';
import Fastify, { LogController, type FastifyInstance } from 'fastify';
import { jsonSchemaTransform, serializerCompiler, validatorCompiler } from 'fastify-type-provider-zod';
import type { FastifyBaseLogger } from 'fastify';
import type { Logger } from 'pino';
import { agentRoutes } from './http/agents.js';
import { blobRoutes } from './http/blobs.js';
import type { HttpContext } from './http/context.js';
import { frameworkErrorOptions, installErrorHandling } from './http/errors.js';
import { eventRoutes } from './http/events.js';
import { galleryRoutes } from './http/gallery.js';
import { jobRoutes } from './http/jobs.js';
import { meshRoutes } from './http/mesh.js';

/** Strip grants from logged URLs. */
const redact = (url: string | undefined): string | undefined => url?.replace(/access_token=[^&]*/g, 'access_token=[redacted]');

/** Build the Fastify app from the orchestrator's parts: one route module per area. */
export async function buildServer(context: HttpContext, logger: Logger, version: string): Promise<FastifyInstance> {
  const app: FastifyInstance = Fastify({
    loggerInstance: logger.child({}, {
      serializers: { req: (req: { method: string; url?: string }) => ({ method: req.method, url: redact(req.url) }) },
    }) as FastifyBaseLogger,
    bodyLimit: context.config.server.bodyLimitBytes,
    logController: new LogController({ disableRequestLogging: true }),
    forceCloseConnections: true,
    ...frameworkErrorOptions(),
  });
  app.decorateRequest('grant', null);
  app.setValidatorCompiler(validatorCompiler);
  app.setSerializerCompiler(serializerCompiler);
  installErrorHandling(app, context.config.server.bodyLimitBytes);
  // Every body the API takes is JSON (uploads have their own parser): plain text is a 415, not a string to validate.
  app.removeContentTypeParser('text/plain');
  await app.register(fastifySwagger, {
    openapi: {
      info: { title: 'gpumesh', version, description: 'The gpumesh orchestrator API. Every /v1 route needs a grant: `Authorization: Bearer <grant>`.' },
      components: { securitySchemes: { grant: { type: 'http', scheme: 'bearer', description: 'A gpumesh grant (macaroon)' } } },
      security: [{ grant: [] }],
    },
    transform: jsonSchemaTransform,
  });
  await app.register(fastifyWebsocket, { options: { maxPayload: 4 * 1024 * 1024 } });
  meshRoutes(app, context);
  jobRoutes(app, context);
  eventRoutes(app, context);
  blobRoutes(app, context);
  agentRoutes(app, context);
  await galleryRoutes(app, context);
  app.get('/openapi.json', { schema: { hide: true } }, async () => app.swagger());
  return app;
}
