import fastifySwagger from '@fastify/swagger';
import fastifyWebsocket from '@fastify/websocket';
import Fastify, { LogController, type FastifyBaseLogger, type FastifyInstance } from 'fastify';
import { serializerCompiler, validatorCompiler } from 'fastify-type-provider-zod';
import type { Logger } from 'pino';
import { agentRoutes } from './http/agents.js';
import { installGrantRules } from './http/auth.js';
import { blobRoutes, type BlobRouteDeps } from './http/blobs.js';
import { frameworkErrorOptions, installErrorHandling } from './http/errors.js';
import { installJsonDepthLimit } from './http/json-depth.js';
import { installJsonText } from './http/json-text.js';
import { requestLogger } from './http/request-logger.js';
import { installStorageFloor } from './http/storage-floor.js';
import type { FreeSpace } from './storage/free-space.js';
import { eventRoutes } from './http/events.js';
import { explainRoutes, type ExplainRouteDeps } from './http/explain.js';
import { galleryRoutes, type GalleryRouteDeps } from './http/gallery.js';
import { hostRoutes, type HostRouteDeps } from './http/hosts.js';
import { grantRoutes, type GrantRouteDeps } from './http/grants.js';
import { installRoutes, type InstallRouteDeps } from './http/install.js';
import { jobRoutes, type JobRouteDeps } from './http/jobs.js';
import { pipelineRoutes, type PipelineRouteDeps } from './http/pipelines.js';
import { meshRoutes, type MeshRouteDeps } from './http/mesh.js';
import { tlsRoutes } from './http/tls.js';
import { uploadRoutes, type UploadRouteDeps } from './http/uploads.js';
import { webhookRoutes, type WebhookRouteDeps } from './http/webhooks.js';
import { modelRoutes, type ModelRouteDeps } from './http/models.js';
import { openApiTransform } from './http/openapi.js';
import { outputRoutes } from './http/outputs.js';
import { pageRoutes } from './http/pages.js';
import { oipRoutes } from './http/oip/routes.js';
import { openAiRoutes } from './http/openai/routes.js';
import { passthroughRoutes, type PassthroughRouteDeps } from './http/passthrough/routes.js';
import { a1111Routes } from './http/a1111/routes.js';
import { comfyUiRoutes, type ComfyUiRouteDeps } from './http/comfyui/routes.js';
import type { TlsMaterial } from './tls-server/index.js';

/** The services the routes use; each route module takes only its own share. */
export interface ServerParts
  extends JobRouteDeps, BlobRouteDeps, MeshRouteDeps, HostRouteDeps, GrantRouteDeps, UploadRouteDeps, ModelRouteDeps, GalleryRouteDeps, InstallRouteDeps, Pick<ExplainRouteDeps, 'explainer'>,
  Pick<WebhookRouteDeps, 'webhooks'>, Pick<PipelineRouteDeps, 'pipelines'>, Pick<ComfyUiRouteDeps, 'hosts' | 'workflowFit' | 'workflowRouting'>,
  PassthroughRouteDeps {
  /** The folder of the gallery page and the mesh view (web/). */
  webRoot: string;
  bodyLimitBytes: number;
  /** The data folder's free space against storage.minFreeMB: the floor the routes of new work are held to. */
  freeSpace: Pick<FreeSpace, 'admit' | 'sawFull'>;
  /** The largest WebSocket frame an agent may send (agents.link.maxFrameBytes). */
  linkFrameBytes: number;
  /** The largest file a client may store (server.uploadLimitBytes): an OpenAI edit's picture too. */
  uploadLimitBytes: number;
}

/** Strip grants from logged URLs. */
const redact = (url: string | undefined): string | undefined => url?.replace(/access_token=[^&]*/g, 'access_token=[redacted]');

/** Build the Fastify app from the orchestrator's parts: one route module per area. With `tls`, it serves HTTPS. */
export async function buildServer(parts: ServerParts, logger: Logger, version: string, tls: TlsMaterial | null = null): Promise<FastifyInstance> {
  // An HTTPS server has the same routes and hooks; only the listening socket differs, so the app keeps the http type.
  const app = Fastify({
    https: tls ? { key: tls.key, cert: tls.cert } : null,
    loggerInstance: logger.child({}, {
      serializers: { req: (req: { method: string; url?: string }) => ({ method: req.method, url: redact(req.url) }) },
    }) as FastifyBaseLogger,
    bodyLimit: parts.bodyLimitBytes,
    logController: new LogController({ disableRequestLogging: true }),
    childLoggerFactory: requestLogger,
    forceCloseConnections: true,
    ...frameworkErrorOptions(),
  }) as unknown as FastifyInstance;
  app.decorateRequest('grant', null);
  app.decorateRequest('uploadBatch', null);
  app.decorateRequest('grantToken', null);
  app.setValidatorCompiler(validatorCompiler);
  app.setSerializerCompiler(serializerCompiler);
  installErrorHandling(app, parts.bodyLimitBytes);
  installJsonText(app);
  installJsonDepthLimit(app);
  installStorageFloor(app, parts.freeSpace);
  // Every body the API takes is JSON (uploads have their own parser): plain text is a 415, not a string to validate.
  app.removeContentTypeParser('text/plain');
  installGrantRules(app, parts);
  await app.register(fastifySwagger, {
    openapi: {
      info: { title: 'gpumesh', version, description: 'The gpumesh orchestrator API. Every /v1 route needs a grant: `Authorization: Bearer <grant>`.' },
      components: { securitySchemes: { grant: { type: 'http', scheme: 'bearer', description: 'A gpumesh grant (macaroon)' } } },
      security: [{ grant: [] }],
    },
    // The zod schemas, and what the routes that read their own bodies declare of them (http/openapi.ts).
    transform: openApiTransform,
  });
  await app.register(fastifyWebsocket, { options: { maxPayload: parts.linkFrameBytes } });
  meshRoutes(app, parts);
  grantRoutes(app, parts);
  jobRoutes(app, parts);
  pipelineRoutes(app, parts);
  explainRoutes(app, parts);
  webhookRoutes(app, parts);
  eventRoutes(app, parts);
  outputRoutes(app, parts);
  blobRoutes(app, parts);
  uploadRoutes(app, parts);
  modelRoutes(app, parts);
  oipRoutes(app, { ...parts, version });
  openAiRoutes(app, parts);
  passthroughRoutes(app, parts);
  a1111Routes(app, { ...parts, version });
  comfyUiRoutes(app, { ...parts, version });
  agentRoutes(app, parts);
  hostRoutes(app, parts);
  galleryRoutes(app, parts);
  await pageRoutes(app, parts.webRoot);
  if (tls) tlsRoutes(app, tls.caCert);
  installRoutes(app, parts);
  app.get('/openapi.json', { schema: { hide: true } }, async () => app.swagger());
  return app;
}
