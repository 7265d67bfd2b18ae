import type { FastifyReply, FastifyRequest } from 'fastify';
import { MeshError } from '../../protocol/index.js';
import type { Action, GrantRequest, VerifiedGrant } from '../auth/index.js';
import type { HttpContext } from './context.js';

declare module 'fastify' {
  interface FastifyRequest {
    grant: VerifiedGrant | null;
  }
}

/**
 * The bearer grant of a request: the Authorization header, or (RFC 6750 §2.3)
 * an `access_token` query parameter, which is the only way an EventSource or
 * an <img> can carry one. Logs redact it.
 */
export function tokenOf(request: FastifyRequest): string | null {
  const header = request.headers.authorization;
  if (header) {
    const match = /^Bearer\s+(\S+)$/i.exec(header);
    if (!match) throw new MeshError('GRANT_INVALID', { detail: 'the Authorization header must be "Bearer <grant>"' });
    return match[1]!;
  }
  // Read the raw URL: route schemas strip query keys they do not name.
  const url = request.raw.url ?? '';
  const start = url.indexOf('?');
  const tokens = start < 0 ? [] : new URLSearchParams(url.slice(start + 1)).getAll('access_token').filter(Boolean);
  if (tokens.length > 1) throw new MeshError('GRANT_INVALID', { detail: 'send one access_token, not several' });
  return tokens[0] ?? null;
}

/**
 * The hook that admits only requests whose grant allows `action`; `describe`
 * adds what the route knows from its URL (the job of an upload). Routes use it
 * as `onRequest`, the first hook of a request, so the grant is checked before
 * the body is read or validated: a request without a grant is a 401 whatever
 * its body, and nothing of a refused body is parsed.
 */
export function requireGrant(context: HttpContext, action: Action, describe?: (request: FastifyRequest) => Omit<GrantRequest, 'action'>) {
  return async (request: FastifyRequest, _reply: FastifyReply): Promise<void> => {
    const token = tokenOf(request);
    if (!token) throw new MeshError('GRANT_MISSING');
    const now = context.clock.now();
    const grant = context.authority.verify(token, now);
    context.authority.authorize(grant, { action, ...describe?.(request) }, now);
    request.grant = grant;
  };
}

/** The request's grant, checked against a fuller description of what it is about to do. */
export function authorizer(context: HttpContext, request: FastifyRequest): (what: GrantRequest) => void {
  return (what) => context.authority.authorize(grantOf(request), what, context.clock.now());
}

export function grantOf(request: FastifyRequest): VerifiedGrant {
  if (!request.grant) throw new MeshError('GRANT_MISSING');
  return request.grant;
}
