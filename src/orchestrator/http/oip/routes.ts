import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { z } from 'zod';
import { DATATYPES, isTerminal, MeshError, TensorSpec, tensorToBytes, VERSION_SEPARATOR, type Datatype, type ModelManifest } from '../../../protocol/index.js';
import type { EventBus } from '../../events/event-bus.js';
import type { JobAdmission, JobReads } from '../../jobs/index.js';
import type { ModelRegistry, RegisteredModel } from '../../registry/index.js';
import type { JobRecord } from '../../store/index.js';
import type { MeshStatus } from '../../status/mesh-status.js';
import { grantOf, type RequestAuth } from '../auth.js';
import { BINARY, errorResponses, type RouteDocs } from '../openapi.js';
import { settleUnreadBody, toMeshError } from '../errors.js';
import { clientGone, jobEnd } from '../prefer-wait.js';
import { decodeTensor, splitBody } from './binary.js';
import { InferRequest, readInferRequest } from './infer-request.js';

export interface OipRouteDeps {
  admission: Pick<JobAdmission, 'submit' | 'persist'>;
  reads: Pick<JobReads, 'mayRead'>;
  events: EventBus;
  registry: ModelRegistry;
  status: MeshStatus;
  auth: RequestAuth;
  version: string;
}

/** The extensions this server has (GET /v2): the binary tensor data extension, Triton's name for it. */
export const OIP_EXTENSIONS = ['binary_tensor_data'];
/** How long an infer request waits for its job: then the answer is 504 and the job goes on. */
const INFER_WAIT_MS = 60_000;
const HEADER_LENGTH = 'inference-header-content-length';

/** What infer answers (built by `answer` below; for the document). */
const InferResponse = z.object({
  model_name: z.string(),
  model_version: z.string(),
  id: z.string().describe("the request's id, else the job's"),
  outputs: z.array(z.object({
    name: z.string(),
    datatype: z.enum(DATATYPES),
    shape: z.array(z.int().min(0)),
    data: z.array(z.union([z.number(), z.boolean(), z.string()])).optional().describe('row-major; absent when the output is sent as binary data'),
    parameters: z.object({ binary_data_size: z.int().min(0) }).optional().describe('an output sent as binary data: its bytes follow the JSON header, in the order of outputs'),
  })),
});
/** OIP's error shape (see the error handler below). */
const OipError = z.object({ error: z.string() });
const BINARY_TENSORS = 'The binary tensor data extension: the first Inference-Header-Content-Length bytes are the JSON inference header (as application/json), then the raw bytes of each tensor flagged with parameters.binary_data_size, in order — little-endian, row-major; a BYTES element as a 4-byte little-endian length and its bytes';

/** The metadata and health answers in /openapi.json (the OIP's own shapes). */
const oipDocs = (description: string, answer: z.ZodType, errors: Record<number, string>): RouteDocs =>
  ({ responses: { 200: { description, content: { 'application/json': answer } }, ...errorResponses(OipError, errors) } });
const OIP_MODEL_ERRORS = { 400: 'Not a tensor model with named inputs', 401: 'No grant, or one that is not valid', 403: 'The grant does not allow mesh:read', 404: 'No tensor model of that name (and version)' };
const LIVE_DOCS = oipDocs('Live', z.strictObject({ live: z.literal(true) }), {});
const READY_DOCS = oipDocs('Ready', z.strictObject({ ready: z.literal(true) }), { 503: 'Not ready, and why' });
const SERVER_DOCS = oipDocs('Server metadata', z.strictObject({ name: z.literal('gpumesh'), version: z.string(), extensions: z.array(z.string()) }), {});
const MODEL_METADATA_DOCS = oipDocs('Model metadata', z.strictObject({
  name: z.string(), versions: z.array(z.string()), platform: z.string().describe('onnxruntime_onnx for an ONNX model, else its engine'),
  inputs: z.array(TensorSpec), outputs: z.array(TensorSpec),
}), OIP_MODEL_ERRORS);
const MODEL_READY_DOCS = oipDocs('Whether the model is ready', z.strictObject({ name: z.string(), ready: z.boolean() }), OIP_MODEL_ERRORS);

/** The infer route's body, headers and answers in /openapi.json: it reads its body itself (`infer`). */
const INFER_DOCS: RouteDocs = {
  body: {
    'application/json': InferRequest,
    'application/octet-stream': { ...BINARY, description: `${BINARY_TENSORS}. Any Content-Type is read this way when Inference-Header-Content-Length is sent.` },
  },
  headers: z.object({
    'Inference-Header-Content-Length': z.string().regex(/^\d+$/).optional().describe('The binary tensor data extension: how many bytes of the body are the JSON inference header; without it the whole body is JSON'),
  }),
  responses: {
    200: {
      description: 'The outputs asked for (all when none is named): JSON, or with binary_data(_output) parameters the JSON header and the outputs\' bytes',
      content: { 'application/json': InferResponse, 'application/octet-stream': { ...BINARY, description: BINARY_TENSORS.replace('inference header', 'inference response') } },
      headers: { 'Inference-Header-Content-Length': { description: 'With an application/octet-stream answer: the bytes of its JSON header', schema: { type: 'integer', minimum: 0 } } },
    },
    ...errorResponses(OipError, {
      400: 'The request is malformed (not the shape above, binary sizes that do not add up, an output the model lacks), or the job failed on its input (INVALID_INPUT)',
      401: 'No grant, or one that is not valid',
      403: 'The grant does not allow jobs:submit, or this model or type',
      404: 'No tensor model of that name (and version)',
      409: 'The job was cancelled',
      413: 'The body is larger than the body limit',
      429: "The model's or the mesh's queue is full, or the grant's rate is spent",
      500: 'The job failed: `<CODE>: <message>`',
      504: 'The job did not end within 60 s; it goes on (GET /v1/jobs/:id)',
    }),
  },
};

/**
 * The Open Inference Protocol v2, REST (KServe's `inference_rest.md`; Triton speaks it): health, server and model
 * metadata, readiness, and `infer` for every tensor model of the registry (its name, and `versions/{v}` for a model
 * added with versions). An infer request is a job like any other — the same grants, admission, batching and routing —
 * answered when it ends. Inputs and outputs travel as JSON or in the binary tensor data extension. Errors are
 * `{"error": "<message>"}` with the status gpumesh gives them.
 */
export function oipRoutes(app: FastifyInstance, deps: OipRouteDeps): void {
  const { registry, status, auth } = deps;
  app.register(async (scope) => {
    // OIP's error shape, not gpumesh's envelope: clients written for Triton read `error` as a string.
    scope.setErrorHandler((error, request, reply) => {
      // Fastify's own client errors keep their status and words; anything else is what toMeshError makes of it (a
      // full disk's STORAGE_FULL, or INTERNAL, logged).
      const given = (error as { statusCode?: number }).statusCode;
      const mesh = error instanceof MeshError ? error : typeof given === 'number' && given >= 400 && given < 500 ? null : toMeshError(error as FastifyError, request);
      settleUnreadBody(request, reply);
      void reply.code(mesh?.status ?? given!).send({ error: mesh?.message ?? (error as Error).message });
    });
    // Requests come as JSON or, with the binary extension, as a JSON header and bytes: read either whole (bounded by the body limit).
    scope.removeAllContentTypeParsers();
    scope.addContentTypeParser('*', { parseAs: 'buffer' }, (_request, body, done) => done(null, body));

    scope.get('/v2/health/live', { schema: { tags: ['oip'], summary: 'OIP: the server is live' }, config: { openapi: LIVE_DOCS } }, async () => ({ live: true }));
    scope.get('/v2/health/ready', {
      schema: { tags: ['oip'], summary: 'OIP: the server is ready (its store open and an agent connected); 503 with why, when not' }, config: { openapi: READY_DOCS },
    }, async () => {
      const reasons = status.notReady();
      if (reasons.length > 0) throw new MeshError('NOT_READY', { detail: reasons.join('; ') });
      return { ready: true };
    });
    scope.get('/v2', { schema: { tags: ['oip'], summary: 'OIP: server metadata' }, config: { openapi: SERVER_DOCS } }, async () => ({ name: 'gpumesh', version: deps.version, extensions: OIP_EXTENSIONS }));

    for (const path of ['/v2/models/:model', '/v2/models/:model/versions/:version']) {
      scope.get(path, {
        schema: { tags: ['oip'], summary: 'OIP: model metadata (its inputs and outputs)' }, config: { openapi: MODEL_METADATA_DOCS }, onRequest: auth.require('mesh:read'),
      }, async (request) => {
        const model = tensorModel(registry, request.params as ModelParams);
        return {
          name: nameOf(model.manifest), versions: versionsOf(registry, model.manifest), platform: model.manifest.engine === 'onnx' ? 'onnxruntime_onnx' : model.manifest.engine,
          inputs: model.manifest.inputs, outputs: model.manifest.outputs ?? [],
        };
      });
      scope.get(`${path}/ready`, {
        schema: { tags: ['oip'], summary: 'OIP: whether the model is ready for inference' }, config: { openapi: MODEL_READY_DOCS }, onRequest: auth.require('mesh:read'),
      }, async (request) => {
        const model = tensorModel(registry, request.params as ModelParams);
        return { name: nameOf(model.manifest), ready: status.notReady().length === 0 };
      });
      scope.post(`${path}/infer`, {
        schema: { tags: ['oip'], summary: 'OIP: run the model (JSON or the binary tensor data extension); a job like any other' },
        config: { openapi: INFER_DOCS },
        onRequest: auth.require('jobs:submit'),
      }, async (request, reply) => {
        // The version is drawn here, by the registry's one rule, and the job names it: the job records what served it.
        return infer(request, reply, tensorModel(registry, request.params as ModelParams, true), deps);
      });
    }
  });
}

interface ModelParams { model: string; version?: string }

/**
 * A tensor model by OIP name and version: `versions/{v}` that version exactly; a bare name as a job naming it runs
 * (`draw`: its route's draw, the split included — each infer is one job's draw) or, for metadata and readiness, the
 * version the name is mainly served by (its pin, the version its split sends most to, else the newest).
 */
function tensorModel(registry: ModelRegistry, params: ModelParams, draw = false): RegisteredModel {
  const family = registry.family(params.model);
  const model = params.version === undefined
    ? (draw ? registry.served(params.model) : registry.described(params.model))
    : registry.get(family ? `${params.model}${VERSION_SEPARATOR}${params.version}` : params.model);
  if (!model || (!family && params.version !== undefined && params.version !== model.manifest.version)) {
    throw new MeshError('NOT_FOUND', { what: `Model ${params.model}${params.version ? ` version ${params.version}` : ''}` });
  }
  if (!model.manifest.inputs?.length || !model.manifest.jobTypes.includes('tensor')) {
    throw new MeshError('BAD_REQUEST', { detail: `model ${params.model} is not a tensor model with named inputs (${model.manifest.jobTypes.join(', ')} jobs): use /v1/jobs` });
  }
  return model;
}

const nameOf = (manifest: ModelManifest): string => manifest.name.split(VERSION_SEPARATOR)[0]!;
const versionsOf = (registry: ModelRegistry, manifest: ModelManifest): string[] => registry.family(nameOf(manifest))?.versions ?? [manifest.version];

async function infer(request: FastifyRequest, reply: FastifyReply, model: RegisteredModel, deps: OipRouteDeps): Promise<unknown> {
  const body = request.body as Buffer | undefined ?? Buffer.alloc(0);
  const headerLength = request.headers[HEADER_LENGTH];
  const { header, binary } = splitBody(body, headerLength === undefined ? null : Number(headerLength));
  const inference = readInferRequest(header);
  const inputs: Record<string, { datatype: Datatype; shape: number[]; data: unknown }> = {};
  let offset = 0;
  for (const input of inference.inputs) {
    const size = input.parameters?.binary_data_size;
    let data: unknown = input.data;
    if (size !== undefined) {
      if (!Number.isSafeInteger(size) || (size as number) < 0 || offset + (size as number) > binary.length) {
        throw new MeshError('BAD_REQUEST', { detail: `input ${input.name}: binary_data_size ${String(size)} is more than the ${binary.length - offset} bytes left` });
      }
      data = decodeTensor(binary.subarray(offset, offset + (size as number)), input.datatype, input.name);
      offset += size as number;
    } else if (data === undefined) {
      throw new MeshError('BAD_REQUEST', { detail: `input ${input.name}: no data (give data, or parameters.binary_data_size and the bytes)` });
    }
    inputs[input.name] = { datatype: input.datatype, shape: input.shape, data };
  }
  if (offset !== binary.length) throw new MeshError('BAD_REQUEST', { detail: `${binary.length - offset} bytes after the inputs' binary data belong to no input` });

  const grant = grantOf(request);
  // The request waits for its job, which is written when it ends (JobAdmission.submit, waited) unless answered sooner.
  const { job } = await deps.admission.submit(grant, { type: 'tensor', model: model.manifest.name, input: { inputs } }, deps.auth.authorizer(request), true);
  if (!deps.reads.mayRead(grant, job)) {
    await deps.admission.persist(job);
    throw new MeshError('NOT_FOUND', { what: `Job ${job.id}` });
  }
  const record = job;
  const ended = await jobEnd(deps.events, job.id, INFER_WAIT_MS, () => isTerminal(record.status), clientGone(reply));
  if (!ended) {
    // The answer says the job goes on: it is stored first.
    await deps.admission.persist(job);
    throw new MeshError('AGENT_TIMEOUT', { host: 'the mesh', budgetMs: INFER_WAIT_MS, basis: `job ${job.id} goes on; GET /v1/jobs/${job.id} for its result` });
  }
  // The answer is the job's record as its end left it: its result, or its error (the view GET /v1/jobs/:id builds, with
  // its attempts and artifacts read from the store, would be thrown away).
  if (record.status !== 'succeeded') {
    const error = record.errorCode ? { code: record.errorCode, message: record.errorMessage ?? '' } : { code: record.status.toUpperCase(), message: `the job ended ${record.status}` };
    const status = error.code === 'INVALID_INPUT' ? 400 : error.code === 'CANCELLED' ? 409 : 500;
    return reply.code(status).send({ error: `${error.code}: ${error.message}` });
  }
  return answer(reply, inference, record, model);
}

/** The response: each output asked for (all when none is named), in JSON or, where asked, as binary data after the header. */
function answer(reply: FastifyReply, inference: InferRequest, job: JobRecord, model: RegisteredModel): unknown {
  const produced = (job.result as { outputs?: Record<string, { datatype: Datatype; shape: number[]; data: (number | boolean | string)[] }> } | null)?.outputs ?? {};
  const wanted = inference.outputs ?? Object.keys(produced).map((name) => ({ name, parameters: undefined }));
  const allBinary = inference.parameters?.binary_data_output === true;
  const parts: Buffer[] = [];
  const outputs = wanted.map((output) => {
    const tensor = produced[output.name];
    if (!tensor) throw new MeshError('BAD_REQUEST', { detail: `output ${output.name}: the model has no output of that name (it has: ${Object.keys(produced).join(', ')})` });
    const binary = output.parameters?.binary_data === true || (allBinary && output.parameters?.binary_data !== false);
    if (!binary) return { name: output.name, datatype: tensor.datatype, shape: tensor.shape, data: tensor.data };
    const bytes = tensorToBytes(tensor.data, tensor.datatype);
    parts.push(bytes);
    return { name: output.name, datatype: tensor.datatype, shape: tensor.shape, parameters: { binary_data_size: bytes.length } };
  });
  const response = { model_name: nameOf(model.manifest), model_version: model.manifest.version, id: inference.id ?? job.id, outputs };
  if (parts.length === 0) return reply.send(response);
  const json = Buffer.from(JSON.stringify(response));
  return reply
    .header('content-type', 'application/octet-stream')
    .header(HEADER_LENGTH, String(json.length))
    .send(Buffer.concat([json, ...parts]));
}
