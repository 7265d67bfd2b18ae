import fastifySwagger from '@fastify/swagger';
import fastifyWebsocket from '@fastify/websocket';
import Fastify, { LogController, type FastifyBaseLogger, type FastifyInstance } from 'fastify';
import { jsonSchemaTransform, serializerCompiler, validatorCompiler } from 'fastify-type-provider-zod';
import type { Logger } from 'pino';
import { agentRoutes } from './http/agents.js';
import { blobRoutes, type BlobRouteDeps } from './http/blobs.js';
import { installErrorHandling } from './http/errors.js';
import { eventRoutes } from './http/events.js';
import { explainRoutes, type ExplainRouteDeps } from './http/explain.js';
import { galleryRoutes } from './http/gallery.js';
import { jobRoutes } from './http/jobs.js';
import { meshRoutes, type MeshRouteDeps } from './http/mesh.js';
import type { EventBus } from './events.js';
import type { JobService } from './jobs/index.js';
import type { AgentHub } from './link/agent-hub.js';

/** The services the routes use; each route module takes only its own share. */
export interface ServerParts extends BlobRouteDeps, MeshRouteDeps, Pick<ExplainRouteDeps, 'explainer'> {
  jobs: JobService;
  events: EventBus;
  hub: AgentHub;
  webRoot: string;
  bodyLimitBytes: number;
}

/** Strip grants from logged URLs. */
const redact = (url: string | undefined): string | undefined => url?.replace(/access_token=[^&]*/g, 'access_token=[redacted]');

/** Build the Fastify app from the orchestrator's parts: one route module per area. */
export async function buildServer(parts: ServerParts, logger: Logger, version: string): Promise<FastifyInstance> {
  const app: FastifyInstance = Fastify({
    loggerInstance: logger.child({}, {
      serializers: { req: (req: { method: string; url?: string }) => ({ method: req.method, url: redact(req.url) }) },
    }) as FastifyBaseLogger,
    bodyLimit: parts.bodyLimitBytes,
    logController: new LogController({ disableRequestLogging: true }),
    return503OnClosing: true,
    forceCloseConnections: true,
  });
  app.decorateRequest('grant', null);
  app.decorateRequest('uploadBatch', null);
  app.setValidatorCompiler(validatorCompiler);
  app.setSerializerCompiler(serializerCompiler);
  installErrorHandling(app, parts.bodyLimitBytes);
  await app.register(fastifySwagger, {
    openapi: {
      info: { title: 'gpumesh', version, description: 'The gpumesh orchestrator API. Every /v1 route needs a grant: `Authorization: Bearer <grant>`.' },
      components: { securitySchemes: { grant: { type: 'http', scheme: 'bearer', description: 'A gpumesh grant (macaroon)' } } },
      security: [{ grant: [] }],
    },
    transform: jsonSchemaTransform,
  });
  await app.register(fastifyWebsocket, { options: { maxPayload: 4 * 1024 * 1024 } });
  meshRoutes(app, parts);
  jobRoutes(app, parts);
  explainRoutes(app, parts);
  eventRoutes(app, parts);
  blobRoutes(app, parts);
  agentRoutes(app, parts);
  await galleryRoutes(app, parts);
  app.get('/openapi.json', { schema: { hide: true } }, async () => app.swagger());
  return app;
}
