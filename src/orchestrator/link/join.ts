import { MeshError } from '../../protocol/index.js';
import type { GrantAuthority, VerifiedGrant } from '../auth/index.js';
import type { AuditLog } from '../auth/audit.js';
import type { Clock } from '../../protocol/clock.js';

/**
 * Whether an agent grant may join as the host and classes its hello claims.
 * The refusal travels in a WebSocket close frame (123 bytes at most), so it
 * names the caveat rather than repeating the whole sentence. A refusal is
 * written to the audit log like a refused request.
 */
export function joinAuthorizer(authority: GrantAuthority, clock: Clock, audit: AuditLog) {
  return (grant: VerifiedGrant, hello: { host: string; classes: string[] }): void => {
    try {
      authority.authorize(grant, { action: 'agent:join', host: hello.host, classes: hello.classes }, clock.now());
    } catch (error) {
      if (error instanceof MeshError) {
        const detail = error.code === 'GRANT_DENIED' ? `caveat "${String(error.params.caveat)}" failed (${String(error.params.detail)})` : error.message;
        audit.record({ event: 'request:refused', grantId: grant.id, route: 'hello on the agent link', status: 403, code: 'AGENT_REJECTED', detail: `host ${hello.host}: ${detail}`.slice(0, 500) });
        throw new MeshError('AGENT_REJECTED', { host: hello.host, detail });
      }
      throw error;
    }
  };
}
