import fastifyMultipart from '@fastify/multipart';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { MeshError } from '../../../protocol/index.js';
import type { ModelRegistry } from '../../registry/index.js';
import { grantOf } from '../auth.js';
import { grantedModels } from '../image-jobs.js';
import { installOpenAiErrors } from './errors.js';
import { EDIT_DOCS, GENERATION_DOCS, MODEL_DOCS, MODELS_DOCS } from './docs.js';
import { GenerationBody, readEdit, readImagesRequest } from './image-requests.js';
import { runImages, type OpenAiImagesDeps } from './images.js';

/** Where the OpenAI-compatible API lives: clients take it as their base URL (`baseURL: <mesh>/openai/v1`). */
const OPENAI_BASE = '/openai/v1';

export interface OpenAiRouteDeps extends OpenAiImagesDeps {
  registry: ModelRegistry;
  /** The largest picture an edit may carry (the client upload limit). */
  uploadLimitBytes: number;
}

/**
 * OpenAI's images API under `/openai/v1`, so the clients people already have (the `openai` SDKs, Open WebUI,
 * LibreChat, scripts) work with a grant as their API key: images/generations, images/edits (multipart), and models
 * in OpenAI's list shape. Everything under the base path answers errors in OpenAI's shape.
 */
export function openAiRoutes(app: FastifyInstance, deps: OpenAiRouteDeps): void {
  const { auth } = deps;
  app.register(async (scope) => {
    installOpenAiErrors(scope);
    await scope.register(fastifyMultipart, {
      limits: { fileSize: deps.uploadLimitBytes, files: 17, fields: 30, fieldSize: 64 * 1024, parts: 40 },
      throwFileSizeLimit: true,
    });

    scope.post('/images/generations', {
      schema: { tags: ['openai'], summary: 'OpenAI images API: generate n pictures from a prompt (url or b64_json; stream: true with partial_images for previews of the refinement)' },
      config: { openapi: GENERATION_DOCS },
      onRequest: auth.require('jobs:submit'),
    }, async (request, reply) => runImages(request, reply, readImagesRequest(GenerationBody, request.body ?? {}), null, deps));

    scope.post('/images/edits', {
      schema: {
        tags: ['openai'], consumes: ['multipart/form-data'],
        summary: 'OpenAI images API: edit a picture (multipart: image or image[], optional mask whose transparent pixels are repainted, prompt, n, size, …) by image-to-image',
      },
      config: { openapi: EDIT_DOCS },
      onRequest: auth.require('jobs:submit'),
    }, async (request, reply) => {
      if (!request.isMultipart()) throw new MeshError('VALIDATION_FAILED', { detail: 'image: an edit is multipart/form-data with the picture as a file part' });
      const edit = await readEdit(request, deps.clientBlobs);
      try {
        return await runImages(request, reply, edit.ask, edit.start, deps);
      } finally {
        await edit.discard();
      }
    });

    scope.get('/models', {
      schema: { tags: ['openai'], summary: 'OpenAI models list: the models this grant may use' },
      config: { openapi: MODELS_DOCS },
      onRequest: auth.requireAny(),
    }, async (request) => ({ object: 'list', data: modelsFor(request, deps.registry) }));

    scope.get('/models/:model', {
      schema: { tags: ['openai'], summary: 'OpenAI model object of one model this grant may use' },
      config: { openapi: MODEL_DOCS },
      onRequest: auth.requireAny(),
    }, async (request) => {
      const name = (request.params as { model: string }).model;
      const model = modelsFor(request, deps.registry).find((entry) => entry.id === name);
      if (!model) throw new MeshError('NOT_FOUND', { what: `Model ${name}` });
      return model;
    });
  }, { prefix: OPENAI_BASE });
}

/** The models a grant may submit to, as OpenAI model objects: each family by its name, each plain model by its own. */
function modelsFor(request: FastifyRequest, registry: ModelRegistry): { id: string; object: 'model'; created: number; owned_by: string }[] {
  return grantedModels(grantOf(request), registry).map(({ name }) => ({ id: name, object: 'model', created: 0, owned_by: 'gpumesh' }));
}
