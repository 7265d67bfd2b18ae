import { Validator } from '@seriousme/openapi-schema-validator';
import { beforeAll, describe, expect, it } from 'vitest';
import { EditFields, GenerationBody } from '../../src/orchestrator/http/openai/image-requests.js';
import { meshForFile } from '../helpers/mesh.js';

/**
 * `/openapi.json` of a real `gpumesh up --no-agent`: every route that takes a body documents it for each content type
 * it reads — the zod-validated JSON routes and the routes that read their own bodies (OIP infer, OpenAI images, the raw
 * uploads) alike — with its answers in the shape its area uses. The routes' behaviour is the business of their own
 * tests (oip, openai-images, uploads, blobs); what is documented here changes none of it.
 */
const running = meshForFile({ args: ['--no-agent'] });

interface Schema {
  type?: string;
  format?: string;
  description?: string;
  properties?: Record<string, Schema>;
  required?: string[];
  items?: Schema;
}
interface Media { schema?: Schema }
interface Operation {
  parameters?: { in: string; name: string; required?: boolean; schema?: Schema }[];
  requestBody?: { required?: boolean; content: Record<string, Media> };
  responses: Record<string, { description?: string; content?: Record<string, Media>; headers?: Record<string, { schema?: Schema }> }>;
}
interface Document {
  openapi: string;
  paths: Record<string, Record<string, Operation>>;
}

let document: Document;
beforeAll(async () => {
  const response = await fetch(`${running().url}/openapi.json`);
  expect(response.status).toBe(200);
  document = (await response.json()) as Document;
});

const operation = (method: string, path: string): Operation => {
  const found = document.paths[path]?.[method];
  if (!found) throw new Error(`${method.toUpperCase()} ${path} is not in the document`);
  return found;
};
const OPERATION_METHODS = new Set(['get', 'head', 'post', 'put', 'patch', 'delete', 'options', 'trace']);
const operations = (): [string, Operation][] => Object.entries(document.paths).flatMap(([path, item]) =>
  Object.entries(item).filter(([method]) => OPERATION_METHODS.has(method)).map(([method, op]) => [`${method.toUpperCase()} ${path}`, op] as [string, Operation]));
const BINARY = { type: 'string', format: 'binary' };

/**
 * The content types of every route that takes a body, and the routes of those methods that take none. A POST, PUT or
 * PATCH route missing from this table fails the test: a new route says what it reads.
 */
const BODIES: Record<string, readonly string[] | null> = {
  'POST /v1/jobs': ['application/json'],
  'POST /v1/jobs:batch': ['application/json'],
  'POST /v1/grants': ['application/json'],
  'POST /v1/grants:narrow': ['application/json'],
  'POST /v1/webhooks/secret': ['application/json'],
  'POST /v1/pipelines': ['application/json'],
  'POST /v1/models': ['application/json'],
  'PUT /v1/models/{name}/route': ['application/json'],
  'POST /v1/models/{name}/load': ['application/json'],
  'POST /v1/models/{name}/unload': ['application/json'],
  'POST /v1/uploads': ['application/json'],
  'PATCH /v1/uploads/{id}': ['application/octet-stream'],
  'POST /v1/uploads/{id}/complete': null,
  'PUT /v1/blobs': ['application/octet-stream', 'image/png', 'image/jpeg', 'image/webp'],
  'PUT /v1/jobs/{id}/outputs/{digest}': ['*/*'],
  'POST /v1/hosts/{id}/drain': null,
  'POST /v2/models/{model}/infer': ['application/json', 'application/octet-stream'],
  'POST /v2/models/{model}/versions/{version}/infer': ['application/json', 'application/octet-stream'],
  'POST /openai/v1/images/generations': ['application/json'],
  'POST /openai/v1/images/edits': ['multipart/form-data'],
  // The ComfyUI pass-through relays whatever body ComfyUI (or its custom nodes) takes.
  'POST /comfyui/{host}/{model}/{path}': ['*/*'],
  'PUT /comfyui/{host}/{model}/{path}': ['*/*'],
  'PATCH /comfyui/{host}/{model}/{path}': ['*/*'],
  'POST /sdapi/v1/options': ['application/json'],
  'POST /sdapi/v1/txt2img': ['application/json'],
  'POST /sdapi/v1/img2img': ['application/json'],
  'POST /sdapi/v1/interrupt': null,
  'POST /sdapi/v1/skip': null,
  // ComfyUI's API reads a prompt as JSON whatever the content type says (SillyTavern's text/plain, urllib's form type).
  'POST /prompt': ['application/json', 'text/plain', 'application/x-www-form-urlencoded'],
  'POST /queue': ['application/json'],
  'POST /interrupt': ['application/json'],
  'POST /upload/image': ['multipart/form-data'],
  'POST /upload/mask': ['multipart/form-data'],
};

describe('/openapi.json', () => {
  it('is a well-formed OpenAPI 3 document: parameters named and placed, every body and answer with a schema or a description', () => {
    expect(document.openapi).toMatch(/^3\.\d+\.\d+$/);
    const problems: string[] = [];
    for (const [label, op] of operations()) {
      const template = label.split(' ')[1]!;
      const inPath = [...template.matchAll(/\{(\w+)\}/g)].map((match) => match[1]!);
      const parameters = op.parameters ?? [];
      for (const name of inPath) if (!parameters.some((parameter) => parameter.in === 'path' && parameter.name === name && parameter.required)) problems.push(`${label}: path parameter ${name} undeclared`);
      for (const parameter of parameters) {
        if (!['path', 'query', 'header', 'cookie'].includes(parameter.in) || !parameter.name || !parameter.schema) problems.push(`${label}: parameter ${JSON.stringify(parameter)}`);
        if (parameter.in === 'path' && !inPath.includes(parameter.name)) problems.push(`${label}: path parameter ${parameter.name} not in the path`);
        // OpenAPI ignores these as header parameters: they belong to the body, the answer and the security scheme.
        if (parameter.in === 'header' && ['content-type', 'accept', 'authorization'].includes(parameter.name.toLowerCase())) problems.push(`${label}: header ${parameter.name}`);
      }
      for (const [type, media] of Object.entries(op.requestBody?.content ?? {})) {
        if (!/^[a-z*]+\/[a-z0-9.+*-]+$/.test(type) || !media.schema) problems.push(`${label}: request body ${type}`);
      }
      if (Object.keys(op.responses ?? {}).length === 0) problems.push(`${label}: no responses`);
      for (const [status, response] of Object.entries(op.responses ?? {})) {
        if (!/^([1-5]\d\d|[1-5]XX|default)$/.test(status) || !response.description) problems.push(`${label}: response ${status}`);
        for (const [type, media] of Object.entries(response.content ?? {})) if (!media.schema) problems.push(`${label}: response ${status} ${type} has no schema`);
      }
    }
    expect(problems).toEqual([]);
  });

  it('is valid by the OpenAPI specification\'s own JSON schema (what code generators check first)', async () => {
    const validator = new Validator();
    const result = await validator.validate(structuredClone(document) as unknown as Record<string, unknown>);
    expect(result.errors ?? [], JSON.stringify(result.errors?.slice(0, 5))).toEqual([]);
    expect(result.valid).toBe(true);
    expect(validator.version).toBe('3.0');
  });

  it('every route documents its answer: what a success sends (a schema for each content type), or that it sends nothing', () => {
    const undocumented = operations().filter(([, op]) => {
      const success = Object.entries(op.responses).filter(([status]) => /^[123]/.test(status));
      return success.length === 0 || success.some(([, answer]) => !answer.content && (!answer.description || answer.description === 'Default Response'));
    }).map(([label]) => label);
    expect(undocumented).toEqual([]);
    for (const [label, op] of operations()) {
      for (const [status, answer] of Object.entries(op.responses)) {
        for (const [type, media] of Object.entries(answer.content ?? {})) expect(media.schema, `${label} ${status} ${type}`).toBeDefined();
      }
    }
  });

  it('every route that takes a body documents it, with each content type it reads', () => {
    const withBodies = operations().filter(([label]) => /^(POST|PUT|PATCH) /.test(label));
    expect(withBodies.map(([label]) => label).sort()).toEqual(Object.keys(BODIES).sort());
    for (const [label, op] of withBodies) {
      const types = BODIES[label];
      if (types === null) expect(op.requestBody, label).toBeUndefined();
      else expect(Object.keys(op.requestBody?.content ?? {}).sort(), label).toEqual([...types!].sort());
    }
    // Bodies are taken by those methods only.
    for (const [label, op] of operations()) if (!/^(POST|PUT|PATCH) /.test(label)) expect(op.requestBody, label).toBeUndefined();
  });

  it('OIP infer: the JSON inference request, or the binary extension with Inference-Header-Content-Length; OIP errors', () => {
    for (const path of ['/v2/models/{model}/infer', '/v2/models/{model}/versions/{version}/infer']) {
      const infer = operation('post', path);
      const json = infer.requestBody!.content['application/json']!.schema!;
      expect(Object.keys(json.properties!)).toEqual(['id', 'parameters', 'inputs', 'outputs']);
      expect(json.required).toEqual(['inputs']);
      expect(Object.keys(json.properties!.inputs!.items!.properties!)).toEqual(expect.arrayContaining(['name', 'shape', 'datatype', 'data']));
      const binary = infer.requestBody!.content['application/octet-stream']!.schema!;
      expect(binary).toMatchObject(BINARY);
      expect(binary.description).toContain('Inference-Header-Content-Length');
      const header = infer.parameters!.find((parameter) => parameter.in === 'header' && parameter.name.toLowerCase() === 'inference-header-content-length');
      expect(header).toMatchObject({ required: false, schema: { type: 'string' } });
      expect(Object.keys(infer.responses['200']!.content!)).toEqual(['application/json', 'application/octet-stream']);
      expect(infer.responses['200']!.content!['application/json']!.schema!.required).toEqual(['model_name', 'model_version', 'id', 'outputs']);
      expect(infer.responses['200']!.headers).toHaveProperty('Inference-Header-Content-Length');
      for (const status of ['400', '401', '403', '404', '500', '504']) {
        expect(infer.responses[status]!.content!['application/json']!.schema, `${path} ${status}`).toMatchObject({ properties: { error: { type: 'string' } }, required: ['error'] });
      }
    }
  });

  it('A1111: txt2img and img2img take A1111\'s fields as JSON (other keys ignored), options the options object; 422 in FastAPI\'s shape, the rest in A1111\'s', () => {
    for (const path of ['/sdapi/v1/txt2img', '/sdapi/v1/img2img']) {
      const op = operation('post', path);
      const body = op.requestBody!.content['application/json']!.schema!;
      expect(Object.keys(body.properties!), path).toEqual(expect.arrayContaining(['prompt', 'negative_prompt', 'seed', 'width', 'height', 'steps', 'batch_size', 'n_iter', 'override_settings']));
      expect(body.required ?? [], path).toEqual([]);
      expect(Object.keys(op.responses['200']!.content!['application/json']!.schema!.properties!), path).toEqual(['images', 'parameters', 'info']);
      expect(JSON.stringify(op.responses['422']!.content!['application/json']!.schema), path).toContain('loc');
      for (const status of ['401', '403', '429']) {
        expect(Object.keys(op.responses[status]!.content!['application/json']!.schema!.properties!), `${path} ${status}`).toEqual(['error', 'detail', 'body', 'errors']);
      }
    }
    expect(Object.keys(operation('post', '/sdapi/v1/img2img').requestBody!.content['application/json']!.schema!.properties!)).toEqual(expect.arrayContaining(['init_images', 'mask', 'denoising_strength']));
  });

  it('OpenAI images: generations take GenerationBody as JSON, edits its fields and the pictures as multipart; OpenAI errors', () => {
    const generations = operation('post', '/openai/v1/images/generations');
    const json = generations.requestBody!.content['application/json']!.schema!;
    expect(Object.keys(json.properties!)).toEqual(Object.keys(GenerationBody.shape));
    expect(json.required).toEqual(['prompt']);

    const edits = operation('post', '/openai/v1/images/edits');
    const form = edits.requestBody!.content['multipart/form-data']!.schema!;
    expect(Object.keys(form.properties!)).toEqual([...Object.keys(EditFields.shape), 'image', 'image[]', 'mask']);
    expect(form.required).toEqual(['prompt']);
    expect(form.properties!.image).toMatchObject(BINARY);
    expect(form.properties!.mask).toMatchObject(BINARY);
    expect(form.properties!['image[]']).toMatchObject({ type: 'array', items: BINARY });

    for (const op of [generations, edits]) {
      expect(Object.keys(op.responses['200']!.content!)).toEqual(['application/json', 'text/event-stream']);
      expect(Object.keys(op.responses['200']!.content!['application/json']!.schema!.properties!)).toEqual(['created', 'data', 'output_format', 'size']);
      for (const status of ['400', '401', '403', '429', '500']) {
        const error = op.responses[status]!.content!['application/json']!.schema!;
        expect(Object.keys(error.properties!.error!.properties!)).toEqual(['message', 'type', 'param', 'code']);
      }
    }
  });

  it('raw uploads: PUT /v1/blobs and chunks of a resumable upload are bytes, with the mesh\'s error envelope', () => {
    const blobs = operation('put', '/v1/blobs');
    expect(blobs.requestBody!.content['application/octet-stream']!.schema).toMatchObject(BINARY);
    expect(Object.keys(blobs.responses['201']!.content!['application/json']!.schema!.properties!)).toEqual(['digest', 'bytes', 'mediaType']);

    const chunk = operation('patch', '/v1/uploads/{id}');
    expect(chunk.requestBody!.content['application/octet-stream']!.schema).toMatchObject(BINARY);
    expect(chunk.parameters!.find((parameter) => parameter.in === 'header' && parameter.name === 'Upload-Offset')).toMatchObject({ required: true });
    expect(chunk.responses['200']!.headers).toHaveProperty('Upload-Offset');
    // The conflict's offset to resume from: in the envelope's details, and in Upload-Offset.
    expect(Object.keys(chunk.responses['409']!.content!['application/json']!.schema!.properties!.error!.properties!)).toEqual(['code', 'message', 'details']);
    expect(chunk.responses['409']!.headers).toHaveProperty('Upload-Offset');

    expect(operation('post', '/v1/uploads').responses['201']!.content!['application/json']!.schema!.properties).toHaveProperty('offset');
    expect(operation('put', '/v1/jobs/{id}/outputs/{digest}').requestBody!.content['*/*']!.schema).toMatchObject(BINARY);
  });
});
