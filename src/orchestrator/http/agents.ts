import type {} from '@fastify/websocket';
import type { FastifyInstance } from 'fastify';
import { LINK_PATH, MeshError } from '../../protocol/index.js';
import { grantOf, requireGrant } from './auth.js';
import type { HttpContext } from './context.js';

/**
 * The agent link endpoint. The grant is checked before the upgrade, so a bad
 * one gets a plain 401/403 the agent can report; the hello is checked against
 * the grant's host and classes after it. A plain GET (no upgrade) is a 426.
 */
export function agentRoutes(app: FastifyInstance, context: HttpContext): void {
  app.route({
    method: 'GET',
    url: LINK_PATH,
    schema: { tags: ['agents'], summary: 'Agent link (WebSocket; agents dial in with an agent grant)' },
    onRequest: requireGrant(context, 'agent:join'),
    // `handler` answers a request that did not ask to upgrade; left to @fastify/websocket it is an empty 404.
    handler: async () => {
      throw new MeshError('UPGRADE_REQUIRED', {}, { headers: { upgrade: 'websocket' } });
    },
    wsHandler: (socket, request) => {
      context.hub.attach(socket, grantOf(request));
    },
  });
}

export function authorizeJoin(context: HttpContext) {
  return (grant: Parameters<HttpContext['authority']['authorize']>[0], hello: { host: string; classes: string[] }): void => {
    try {
      context.authority.authorize(grant, { action: 'agent:join', host: hello.host, classes: hello.classes }, context.clock.now());
    } catch (error) {
      // The reason travels in a WebSocket close frame (123 bytes at most): name the caveat, not the whole sentence.
      if (error instanceof MeshError) {
        const detail = error.code === 'GRANT_DENIED' ? `caveat "${String(error.params.caveat)}" failed (${String(error.params.detail)})` : error.message;
        throw new MeshError('AGENT_REJECTED', { host: hello.host, detail });
      }
      throw error;
    }
  };
}
