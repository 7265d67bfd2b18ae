import type {} from '@fastify/websocket';
import type { FastifyInstance } from 'fastify';
import { LINK_PATH } from '../../protocol/index.js';
import type { AgentHub } from '../link/agent-hub.js';
import { grantOf, type RequestAuth } from './auth.js';

/**
 * The agent link endpoint. The grant is checked before the upgrade, so a bad
 * one gets a plain 401/403 the agent can report; the hello is checked against
 * the grant's host and classes after it.
 */
export function agentRoutes(app: FastifyInstance, deps: { hub: AgentHub; auth: RequestAuth }): void {
  app.get(LINK_PATH, {
    websocket: true,
    schema: { tags: ['agents'], summary: 'Agent link (WebSocket; agents dial in with an agent grant)' },
    preHandler: deps.auth.require('agent:join'),
  }, (socket, request) => {
    deps.hub.attach(socket, grantOf(request));
  });
}
