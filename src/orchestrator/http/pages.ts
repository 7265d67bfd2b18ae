import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import fastifyStatic from '@fastify/static';
import type { FastifyInstance } from 'fastify';

/** uPlot's own files (the mesh view's plots), served as the package ships them: no build step, no copy. */
const UPLOT_DIST = join(dirname(createRequire(import.meta.url).resolve('uplot/package.json')), 'dist');
const UPLOT_FILES = new Set(['uPlot.esm.js', 'uPlot.min.css']);

/**
 * What the pages may load: their own scripts, styles, pictures, clips and API, nothing inline and nothing from
 * elsewhere; blob: for a download made in the page. A page that never needs an inline script keeps it that way.
 */
const PAGE_CSP = [
  "default-src 'self'", "script-src 'self'", "style-src 'self'", "img-src 'self' data: blob:", "media-src 'self' blob:",
  "connect-src 'self'", "object-src 'none'", "base-uri 'none'", "form-action 'self'", "frame-ancestors 'none'",
].join('; ');

/**
 * Every answer of this scope carries these, whatever path reached it (`/`, `/web/index.html`, a script, a 304, a
 * 404): a page is the same page under each of its addresses, so it must be locked down under each. No framing, no
 * sniffing a script out of a text file, and no Referer — the pages' addresses once carried a grant in their fragment,
 * and what a page links to learns nothing of where it was.
 */
export const PAGE_HEADERS: Readonly<Record<string, string>> = {
  'content-security-policy': PAGE_CSP,
  'x-content-type-options': 'nosniff',
  'referrer-policy': 'no-referrer',
};

/**
 * The gallery page (`/`), the mesh view (`/mesh`) and their files under `/web/` (web/, and uPlot's), in a scope of
 * their own whose every answer carries PAGE_HEADERS. The pages need no grant; everything they fetch does.
 */
export async function pageRoutes(app: FastifyInstance, webRoot: string): Promise<void> {
  await app.register(async (scope) => {
    scope.addHook('onRequest', (_request, reply, done) => {
      void reply.headers(PAGE_HEADERS);
      done();
    });
    await scope.register(fastifyStatic, { root: webRoot, prefix: '/web/', index: false, cacheControl: true, maxAge: 0 });
    await scope.register(fastifyStatic, {
      root: UPLOT_DIST, prefix: '/web/vendor/uplot/', index: false, decorateReply: false, cacheControl: true, maxAge: 0,
      allowedPath: (path) => UPLOT_FILES.has(path.replace(/^\//, '')),
    });
    scope.get('/', { schema: { hide: true } }, (_request, reply) => reply.sendFile('index.html'));
    scope.get('/mesh', { schema: { hide: true } }, (_request, reply) => reply.sendFile('mesh.html'));
  });
}
