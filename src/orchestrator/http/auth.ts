import type { FastifyReply, FastifyRequest } from 'fastify';
import { MeshError } from '../../protocol/index.js';
import { UploadCredentials, type Action, type GrantAuthority, type GrantRequest, type VerifiedGrant } from '../auth/index.js';
import type { Clock } from '../clock.js';

declare module 'fastify' {
  interface FastifyRequest {
    grant: VerifiedGrant | null;
    /** The batch whose outputs an upload credential lets this request deliver. */
    uploadBatch: string | null;
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
  return start < 0 ? null : new URLSearchParams(url.slice(start + 1)).get('access_token');
}

export function grantOf(request: FastifyRequest): VerifiedGrant {
  if (!request.grant) throw new MeshError('GRANT_MISSING');
  return request.grant;
}

/** Checks the grants of HTTP requests: the one object route modules use for authorization. */
export class RequestAuth {
  readonly #authority: GrantAuthority;
  readonly #uploads: UploadCredentials;
  readonly #clock: Clock;

  constructor(authority: GrantAuthority, uploads: UploadCredentials, clock: Clock) {
    this.#authority = authority;
    this.#uploads = uploads;
    this.#clock = clock;
  }

  /** A route hook that admits only requests carrying an agent's upload credential; it records the batch it covers. */
  requireUpload() {
    return async (request: FastifyRequest, _reply: FastifyReply): Promise<void> => {
      const token = tokenOf(request);
      if (!token) throw new MeshError('GRANT_MISSING');
      if (!UploadCredentials.looksLike(token)) throw new MeshError('GRANT_INVALID', { detail: 'uploads take the upload credential of the batch (from its run message)' });
      request.uploadBatch = this.#uploads.verify(token, this.#clock.now()).batchId;
    };
  }

  /**
   * A route hook that admits only requests whose grant allows `action`;
   * `describe` adds what the route knows from its URL (the job of an upload).
   */
  require(action: Action, describe?: (request: FastifyRequest) => Omit<GrantRequest, 'action'>) {
    return async (request: FastifyRequest, _reply: FastifyReply): Promise<void> => {
      const token = tokenOf(request);
      if (!token) throw new MeshError('GRANT_MISSING');
      const now = this.#clock.now();
      const grant = this.#authority.verify(token, now);
      this.#authority.authorize(grant, { action, ...describe?.(request) }, now);
      request.grant = grant;
    };
  }

  /** The request's grant, checked against a fuller description of what it is about to do. */
  authorizer(request: FastifyRequest): (what: GrantRequest) => void {
    return (what) => this.#authority.authorize(grantOf(request), what, this.#clock.now());
  }

  now(): number {
    return this.#clock.now();
  }
}
