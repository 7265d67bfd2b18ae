import type { FastifyInstance } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { LoadAnswer, ModelFamily, Models, ModelVersion, UnloadAnswer } from '../../protocol/api/index.js';
import { familyOf, MeshError, VERSION_SEPARATOR } from '../../protocol/index.js';
import type { ReplicaRequests } from '../autoscale/replica-requests.js';
import { AddModelBody, versionView, type ModelCatalog } from '../registry/catalog.js';
import type { ModelRegistry } from '../registry/index.js';
import type { RequestAuth } from './auth.js';
import { errorAnswers, json } from './openapi.js';

export interface ModelRouteDeps {
  registry: ModelRegistry;
  catalog: ModelCatalog;
  replicas: ReplicaRequests;
  auth: RequestAuth;
}

const ModelParams = z.object({ name: z.string().min(1).max(150) });
const HostBody = z.strictObject({ host: z.string().min(1).max(100).optional() }).optional();
const LoadBody = z.strictObject({
  host: z.string().min(1).max(100).optional(),
  replicas: z.number().int().min(1).max(1000).optional(),
}).optional();

/**
 * The model registry over HTTP (`gpumesh models …`): add a version of a model from a file stored by digest, show a
 * model and its versions, remove a version, choose which version its name means (pinned, a traffic split), and make
 * it resident on a host or let it go. Reading needs `mesh:read`; every change `models:write` (admin grants have it).
 */
export function modelRoutes(app: FastifyInstance, deps: ModelRouteDeps): void {
  const { registry, catalog, replicas, auth } = deps;
  const routes = app.withTypeProvider<ZodTypeProvider>();

  routes.get('/v1/models', {
    schema: { tags: ['mesh'], summary: 'Models in the registry with their policies (each version of a model added at run time with its name and version apart), and the models with versions: which version each name runs' },
    config: { openapi: { responses: { 200: json('Every model version, and the models with versions', Models), ...errorAnswers({}) } } },
    onRequest: auth.require('mesh:read'),
  }, async () => catalog.list());

  routes.post('/v1/models', {
    schema: {
      body: AddModelBody, tags: ['models'],
      summary: 'Add a model version from a stored file (its inputs and outputs read from the ONNX file); the model\'s newest version unless another is pinned',
    },
    config: {
      openapi: {
        responses: {
          201: json('The version added: its manifest (inputs and outputs as read from the file) and policy', ModelVersion),
          ...errorAnswers({
            400: 'The body, or a file that is not a model this engine takes (an ONNX file whose external data names anything but a file of the model: INVALID_INPUT)',
            403: 'A setting only a host\'s own config may give: a command, a server\'s url, cwd, env, a workflow path, apiKeyEnv, process: agent (HOST_CONFIG_ONLY)',
            404: 'A file named by digest is not stored', 409: 'The version exists (MODEL_EXISTS)',
            507: 'The data folder\'s disk is below its floor (STORAGE_FULL)',
          }),
        },
      },
    },
    onRequest: auth.require('models:write'),
  }, async (request, reply) => {
    const added = await catalog.add(request.body);
    void reply.code(201);
    return versionView(added);
  });

  routes.get('/v1/models/:name', {
    schema: { params: ModelParams, tags: ['models'], summary: 'A model with its versions and which version its name runs (`<name>@<version>`: that version alone)' },
    config: {
      openapi: {
        responses: { 200: json('A model with versions (its route and every version), or one version or model alone', z.union([ModelFamily, ModelVersion])), ...errorAnswers({ 404: 'No such model' }) },
      },
    },
    onRequest: auth.require('mesh:read'),
  }, async (request) => {
    const { name } = request.params;
    if (registry.family(name)) return catalog.view(name);
    const model = registry.get(name);
    if (!model) throw new MeshError('NOT_FOUND', { what: `Model ${name}` });
    return versionView(model);
  });

  routes.delete('/v1/models/:name', {
    schema: { params: ModelParams, tags: ['models'], summary: 'Remove a model version, `<name>@<version>` (409 while jobs are queued or running on it)' },
    config: {
      openapi: {
        responses: {
          204: { description: 'Removed' },
          ...errorAnswers({ 400: 'No version named', 404: 'No such version', 409: 'Jobs are queued or running on it (MODEL_IN_USE), or mesh.yaml pins it (MODEL_PINNED)' }),
        },
      },
    },
    onRequest: auth.require('models:write'),
  }, async (request, reply) => {
    const [model, version] = request.params.name.split(VERSION_SEPARATOR);
    if (!version) throw new MeshError('VALIDATION_FAILED', { detail: `name the version to remove: ${model}@<version> (${registry.family(model!)?.versions.join(', ') ?? 'no versions'})` });
    await catalog.remove(model!, version);
    return reply.code(204).send();
  });

  routes.put('/v1/models/:name/route', {
    schema: {
      params: ModelParams, tags: ['models'],
      body: z.strictObject({
        pinned: z.string().min(1).max(40).nullable().default(null),
        split: z.record(z.string().min(1).max(40), z.number().min(0).max(1_000_000)).nullable().default(null),
      }),
      summary: 'Which version a job that names only the model runs: `pinned`, or a traffic `split` by share ({"1": 90, "2": 10}); both null: the newest',
    },
    config: {
      openapi: {
        responses: { 200: json('The model, routed', ModelFamily), ...errorAnswers({ 400: 'A version it does not have, or a split without a positive share', 404: 'No such model', 409: 'mesh.yaml pins it (MODEL_PINNED)' }) },
      },
    },
    onRequest: auth.require('models:write'),
  }, async (request) => catalog.route(request.params.name, request.body));

  routes.post('/v1/models/:name/load', {
    schema: {
      params: ModelParams, body: LoadBody, tags: ['models'],
      summary: 'Make a model resident: on the named host, else on max(1, minReplicas) hosts or `replicas` (capped by maxReplicas), those holding it first, then where the autoscaler would place replicas; answers once each is, with every host\'s devices\' memory before and after, and a note when fewer could be loaded',
    },
    config: {
      openapi: {
        responses: {
          200: json('Where it is resident now', LoadAnswer),
          ...errorAnswers({ 400: 'Both host and replicas', 404: 'No such model or connected host', 503: 'No host answered in time (NOT_READY)', 507: 'No host had room (NO_ROOM), with each refusal' }),
        },
      },
    },
    onRequest: auth.require('models:write'),
  }, async (request) => {
    const { host, replicas: count } = request.body ?? {};
    if (host !== undefined && count !== undefined) throw new MeshError('VALIDATION_FAILED', { detail: 'give host (one host) or replicas (how many hosts), not both' });
    return replicas.load(resolve(registry, request.params.name), { host, replicas: count });
  });

  routes.post('/v1/models/:name/unload', {
    schema: { params: ModelParams, body: HostBody, tags: ['models'], summary: 'Let a model go on a host (the named one, else every host that holds it); answers once it has, with the devices\' memory before and after' },
    config: { openapi: { responses: { 200: json('Where it was let go', UnloadAnswer), ...errorAnswers({ 404: 'No such model or connected host' }) } } },
    onRequest: auth.require('models:write'),
  }, async (request) => ({ unloaded: await replicas.unload(resolve(registry, request.params.name).manifest.name, request.body?.host) }));
}

/** A model by its name (a model with versions: the version its name is mainly served by now) or by `<name>@<version>`. */
function resolve(registry: ModelRegistry, name: string) {
  const model = registry.described(name);
  if (!model) throw new MeshError('NOT_FOUND', { what: `Model ${name}${registry.family(familyOf(name)) ? ` (versions: ${registry.family(familyOf(name))!.versions.join(', ')})` : ''}` });
  return model;
}
