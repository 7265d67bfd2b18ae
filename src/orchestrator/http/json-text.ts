import type { FastifyInstance } from 'fastify';

declare module 'fastify' {
  interface FastifyRequest {
    /** A JSON body's text as its client sent it, on routes that keep it (`keepsJsonText`); null elsewhere. */
    jsonText: string | null;
  }
  interface FastifyContextConfig {
    /** The route keeps its JSON body's text beside the parsed body (`request.jsonText`). */
    keepsJsonText?: boolean;
  }
}

/** Route config of a route that keeps its JSON body's text: POST /v1/jobs stores a job's input as it was sent. */
export const KEEPS_JSON_TEXT = { keepsJsonText: true } as const;

/**
 * JSON bodies are parsed by Fastify's own parser, with its settings for `__proto__` and `constructor` keys; on routes
 * that ask (`keepsJsonText`), the text it parsed stays on the request. Elsewhere it is let go as soon as it is parsed,
 * as before: a large body is not held twice for the whole request.
 */
export function installJsonText(app: FastifyInstance): void {
  const { onProtoPoisoning = 'error', onConstructorPoisoning = 'error' } = app.initialConfig;
  const parse = app.getDefaultJsonParser(onProtoPoisoning, onConstructorPoisoning);
  app.decorateRequest('jsonText', null);
  app.removeContentTypeParser('application/json');
  app.addContentTypeParser('application/json', { parseAs: 'string' }, (request, text, done) => {
    if (request.routeOptions.config.keepsJsonText) request.jsonText = text as string;
    parse(request, text as string, done);
  });
}
