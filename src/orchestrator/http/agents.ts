import type {} from '@fastify/websocket';
import type { FastifyInstance } from 'fastify';
import { LINK_PATH, MeshError } from '../../protocol/index.js';
import { grantOf, requireGrant } from './auth.js';
import type { HttpContext } from './context.js';

/**
 * The agent link endpoint. The grant is checked before the upgrade, so a bad
 * one gets a plain 401/403 the agent can report; the hello is checked against
 * the grant's host and classes after it.
 */
export function agentRoutes(app: FastifyInstance, context: HttpContext): void {
  app.get(LINK_PATH, {
    websocket: true,
    schema: { tags: ['agents'], summary: 'Agent link (WebSocket; agents dial in with an agent grant)' },
    preHandler: requireGrant(context, 'agent:join'),
  }, (socket, request) => {
    context.hub.attach(socket, grantOf(request));
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
