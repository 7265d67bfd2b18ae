import { createReadStream } from 'node:fs';
import type { FastifyInstance, FastifyReply } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { ErrorEnvelope } from '../../protocol/api/index.js';
import { MeshError } from '../../protocol/index.js';
import type { PackageFile, SelfPackage } from '../install/self-package.js';
import { BINARY, errorResponses } from './openapi.js';

/** The package's bytes, for the document. */
const PACKAGE = { description: 'The npm package (a gzipped tarball)', content: { 'application/gzip': BINARY } };

export interface InstallRouteDeps {
  selfPackage: SelfPackage;
}

/** Where the package with this digest is served: a URL that names its content, so npx never reuses another build. */
const installPath = (sha256: string): string => `/install/sha256/${sha256}/gpumesh.tgz`;

const InstallInfo = z.object({
  version: z.string(),
  sha256: z.string().describe('sha256:<hex> of the tarball'),
  integrity: z.string().describe('the tarball\'s Subresource Integrity, sha512-<base64> (as npm records it)'),
  bytes: z.number().int(),
  path: z.string().describe('the content-addressed path of the tarball on this orchestrator'),
});

/**
 * The orchestrator's own npm package, for a machine that has only Node: `npx --yes <url>/install/sha256/<hex>/gpumesh.tgz
 * agent --join …` (the line `gpumesh grant create --agent` prints). No grant: it is the code anyone may read in the
 * repository, and npm sends none. The digest travels in headers too (`Repr-Digest`, RFC 9530; the older `Digest`,
 * RFC 3230; npm's SRI form in `X-Gpumesh-Integrity`), so a careful installer can check what it fetched.
 */
export function installRoutes(app: FastifyInstance, deps: InstallRouteDeps): void {
  const { selfPackage } = deps;
  const routes = app.withTypeProvider<ZodTypeProvider>();

  routes.get('/install', {
    schema: {
      tags: ['install'], security: [],
      summary: 'The package this orchestrator serves to joining hosts: its version, digests and content-addressed path (no grant needed)',
      response: { 200: InstallInfo },
    },
  }, async () => {
    const file = await selfPackage.get();
    return { version: file.version, sha256: `sha256:${file.sha256}`, integrity: file.integrity, bytes: file.bytes, path: installPath(file.sha256) };
  });

  routes.get('/install/gpumesh.tgz', {
    schema: { tags: ['install'], security: [], summary: 'This orchestrator\'s own npm package (whatever build it serves now; no grant needed)' },
    config: { openapi: { responses: { 200: PACKAGE, ...errorResponses(ErrorEnvelope, { 503: 'It cannot serve its own package (INSTALL_PACKAGE_UNAVAILABLE)' }) } } },
  }, async (_request, reply) => {
    // The same URL names a new build after an upgrade: a cache must ask again each time.
    return send(reply, await selfPackage.get(), 'no-cache');
  });

  routes.get('/install/sha256/:sha256/gpumesh.tgz', {
    schema: {
      tags: ['install'], security: [],
      summary: 'This orchestrator\'s own npm package, if its SHA-256 is the one named (the join line\'s URL; no grant needed); 410 if it serves another build now',
      params: z.object({ sha256: z.string().regex(/^[0-9a-f]{64}$/, 'the tarball\'s SHA-256: 64 lowercase hex digits') }),
    },
    config: {
      openapi: {
        responses: {
          200: PACKAGE,
          ...errorResponses(ErrorEnvelope, { 400: 'Not a SHA-256', 410: 'It serves another build now (INSTALL_PACKAGE_CHANGED): mint a new join line', 503: 'It cannot serve its own package' }),
        },
      },
    },
  }, async (request, reply) => {
    const file = await selfPackage.get();
    if (request.params.sha256 !== file.sha256) {
      throw new MeshError('INSTALL_PACKAGE_CHANGED', { version: file.version, current: file.sha256, asked: request.params.sha256 });
    }
    // The URL names the bytes, so they never change under it.
    return send(reply, file, 'public, max-age=31536000, immutable');
  });
}

function send(reply: FastifyReply, file: PackageFile, cacheControl: string): FastifyReply {
  const sha256 = Buffer.from(file.sha256, 'hex').toString('base64');
  return reply
    .header('content-type', 'application/gzip')
    .header('content-length', file.bytes)
    .header('content-disposition', `attachment; filename="gpumesh-${file.version}.tgz"`)
    .header('cache-control', cacheControl)
    .header('etag', `"sha256-${file.sha256}"`)
    .header('repr-digest', `sha-256=:${sha256}:`)
    .header('digest', `sha-256=${sha256}`)
    .header('x-gpumesh-integrity', file.integrity)
    .send(createReadStream(file.path));
}
