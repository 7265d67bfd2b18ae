import type {} from '@fastify/websocket';
import type { FastifyInstance } from 'fastify';
import { LINK_PATH, MeshError } from '../../protocol/index.js';
import type { AgentHub } from '../link/agent-hub.js';
import { grantOf, type RequestAuth } from './auth.js';
import { errorAnswers } from './openapi.js';

/**
 * The agent link endpoint. The grant is checked before the upgrade, so a bad
 * one gets a plain 401/403 the agent can report; the hello is checked against
 * the grant's host and classes after it. A plain GET (no upgrade) is a 426.
 */
export function agentRoutes(app: FastifyInstance, deps: { hub: AgentHub; auth: RequestAuth }): void {
  app.route({
    method: 'GET',
    url: LINK_PATH,
    schema: { tags: ['agents'], summary: 'Agent link (WebSocket; agents dial in with an agent grant)' },
    config: {
      openapi: {
        responses: {
          101: { description: 'Switched to the WebSocket link: JSON messages both ways (protocol/link.ts), the hello first' },
          ...errorAnswers({ 426: 'A plain GET: this route is a WebSocket (UPGRADE_REQUIRED)' }),
        },
      },
    },
    onRequest: deps.auth.require('agent:join'),
    // `handler` answers a request that did not ask to upgrade; left to @fastify/websocket it is an empty 404.
    handler: async () => {
      throw new MeshError('UPGRADE_REQUIRED', {}, { headers: { upgrade: 'websocket' } });
    },
    wsHandler: (socket, request) => {
      deps.hub.attach(socket, grantOf(request), request.raw.socket);
    },
  });
}
