import type { FastifyInstance } from 'fastify';
import { TLS_CA_PATH } from '../../tls-client/fingerprint.js';

/**
 * The mesh's CA certificate, without a grant: a client fetches it on first contact and trusts it
 * only if its SHA-256 fingerprint is the one its grant names, so serving it to anyone gives nothing away.
 */
export function tlsRoutes(app: FastifyInstance, caCert: string): void {
  app.get(TLS_CA_PATH, {
    schema: {
      tags: ['tls'], summary: 'The CA certificate of a TLS mesh (PEM; no grant needed). Pin it by the fingerprint in your grant',
      security: [],
    },
  }, async (_request, reply) => {
    void reply.header('content-type', 'application/x-pem-file');
    void reply.header('cache-control', 'no-cache');
    return caCert;
  });
}
