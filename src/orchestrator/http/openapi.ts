import type { SwaggerTransform } from '@fastify/swagger';
import type { FastifySchema } from 'fastify';
import { jsonSchemaTransform } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { ErrorEnvelope } from '../../protocol/api/index.js';

/**
 * What `/openapi.json` says of the routes that read their own bodies: the OIP's infer (JSON, or a JSON header and raw
 * tensor bytes), OpenAI's images (JSON; multipart for an edit) and the raw uploads (bytes streamed to disk). Each
 * such route has no `schema.body` — Fastify would validate it, or parse it, before the route's own reader, and the
 * order of checks and the answers would change — so it names its body, headers and answers in its route config
 * (`config.openapi`) instead, which only the document reads. Zod schemas given there are converted as the validated
 * routes' are (`jsonSchemaTransform`); the routes themselves parse with the same zod schemas.
 */
export interface RouteDocs {
  /**
   * The request body by content type: a zod schema (what the route parses it with), or an OpenAPI schema object.
   * Left out, the route's own `schema.body` (if any) is the body.
   */
  body?: Record<string, DocSchema>;
  /** The request headers the route reads (zod, as a validated route's `schema.headers`). */
  headers?: z.ZodObject;
  /** The answers by status: at least the main success and the errors, each in the shape its area answers in. */
  responses: Record<number, DocResponse>;
  /**
   * The name the document gives a route's trailing wildcard (`/comfyui/:host/:model/*` is documented as
   * `/comfyui/{host}/{model}/{path}`): OpenAPI's path templates take named parameters only.
   */
  wildcard?: string;
}

export interface DocResponse {
  description: string;
  /** The body by content type; none for an answer without one. */
  content?: Record<string, DocSchema>;
  /** Headers of the answer, by name. */
  headers?: Record<string, { description: string; schema: OpenApiSchema }>;
}

/** A plain OpenAPI (3.0) schema object, for what zod does not describe: bytes, an event stream. */
export type OpenApiSchema = Record<string, unknown>;
export type DocSchema = z.ZodType | OpenApiSchema;

declare module 'fastify' {
  interface FastifyContextConfig {
    /** The body, headers and answers of a route that reads its own body, for /openapi.json only (see RouteDocs). */
    openapi?: RouteDocs;
  }
}

/** Raw bytes: an upload, the tail of an OIP binary request. */
export const BINARY: OpenApiSchema = { type: 'string', format: 'binary' };

/** Error answers in one shape, by status, each described by what gives it. */
export function errorResponses(body: DocSchema, reasons: Record<number, string>): Record<number, DocResponse> {
  return Object.fromEntries(Object.entries(reasons).map(([status, description]) => [status, { description, content: { 'application/json': body } }]));
}

/** A JSON answer, documented. */
export const json = (description: string, schema: z.ZodType): DocResponse => ({ description, content: { 'application/json': schema } });

const GRANT_ERRORS = { 401: 'No grant, or one that is not valid (expired, revoked, malformed)', 403: 'The grant does not allow this (the caveat that failed is named)' };

/** The grant errors of a route that names the action it needs, in those words. */
export const grantErrors = (action: string): Record<number, string> => ({ 401: 'No grant, or one that is not valid', 403: `The grant does not allow ${action}` });

/** The error answers of a route that needs a grant: no grant or one not valid (401), one that may not (403), and its own. */
export const errorAnswers = (reasons: Record<number, string>): Record<number, DocResponse> => errorResponses(ErrorEnvelope, { ...GRANT_ERRORS, ...reasons });

/** Bytes of a given media type, documented. */
export const bytesOf = (description: string, mediaTypes: readonly string[]): DocResponse => ({
  description, content: Object.fromEntries(mediaTypes.map((type) => [type, BINARY])),
});

/**
 * The document's transform: the route's own schema as `fastify-type-provider-zod` converts it, and for a route with
 * `config.openapi`, its body, headers and answers added. Nothing here reaches validation or serialization.
 */
export const openApiTransform: SwaggerTransform = (input) => {
  const base = jsonSchemaTransform(input as Parameters<typeof jsonSchemaTransform>[0]);
  const docs = input.route.config?.openapi;
  if (!docs || base.schema.hide) return base;
  const convert = (schema: DocSchema, io: 'input' | 'output'): OpenApiSchema => (schema instanceof z.ZodType ? zodToOpenApi(schema, io, input) : schema);
  const content = (byType: Record<string, DocSchema>, io: 'input' | 'output') =>
    Object.fromEntries(Object.entries(byType).map(([type, schema]) => [type, { schema: convert(schema, io) }]));
  const schema: FastifySchema & Record<string, unknown> = {
    ...base.schema,
    ...(docs.body ? { body: { content: content(docs.body, 'input') } } : {}),
    response: Object.fromEntries(Object.entries(docs.responses).map(([status, response]) => [status, {
      description: response.description,
      ...(response.headers ? { headers: Object.fromEntries(Object.entries(response.headers).map(([name, header]) => [name, { description: header.description, ...header.schema }])) } : {}),
      // An answer with no body: swagger leaves out the content of a `null` schema.
      ...(response.content ? { content: content(response.content, 'output') } : { type: 'null' }),
    }])),
  };
  if (docs.headers) schema.headers = convert(docs.headers, 'input');
  if (!docs.wildcard) return { schema, url: base.url };
  const params = schema.params as { properties?: Record<string, unknown>; required?: string[] } | undefined;
  if (params?.properties && '*' in params.properties) {
    const { '*': wildcard, ...named } = params.properties;
    schema.params = { ...params, properties: { ...named, [docs.wildcard]: wildcard }, required: params.required?.map((name) => (name === '*' ? docs.wildcard! : name)) };
  }
  return { schema, url: base.url.replace(/\*$/, `:${docs.wildcard}`) };
};

/** A zod schema as the validated routes' schemas appear in the document: the same converter, the same OpenAPI version. */
function zodToOpenApi(schema: z.ZodType, io: 'input' | 'output', input: Parameters<SwaggerTransform>[0]): OpenApiSchema {
  const converted = jsonSchemaTransform({ ...input, schema: io === 'input' ? { body: schema } : { response: { 200: schema } } } as Parameters<typeof jsonSchemaTransform>[0]).schema;
  return (io === 'input' ? converted.body : (converted.response as Record<number, unknown>)[200]) as OpenApiSchema;
}
