import type { FastifyInstance, onRequestHookHandler } from 'fastify';
import type { FreeSpace } from '../storage/free-space.js';
import { storageFullError } from '../storage/free-space.js';

/**
 * The routes that bring new bytes or new work to the disk: uploads (in one request, or a resumable upload's start and
 * chunks), submits (the jobs API, OIP infer, OpenAI images) and model adds. Below the free-space floor they are
 * refused before anything is read or written; everything else — reads, cancels, deletes (which free space), a
 * resumable upload's `complete` (its bytes are on disk already), agents' outputs of jobs already accepted — goes on.
 */
export const NEW_WORK_ROUTES: ReadonlySet<string> = new Set([
  'PUT /v1/blobs', 'POST /v1/uploads', 'PATCH /v1/uploads/:id',
  'POST /v1/jobs', 'POST /v1/jobs::batch',
  'POST /v2/models/:model/infer', 'POST /v2/models/:model/versions/:version/infer',
  'POST /openai/v1/images/generations', 'POST /openai/v1/images/edits',
  'POST /sdapi/v1/txt2img', 'POST /sdapi/v1/img2img',
  'POST /v1/models',
  // The ComfyUI-compatible door, at the root and under /api (http/comfyui/routes.ts).
  ...['', '/api'].flatMap((prefix) => [`POST ${prefix}/prompt`, `POST ${prefix}/upload/image`, `POST ${prefix}/upload/mask`]),
]);

/**
 * The free-space floor on the routes of new work (after their grant check, so a request without a grant learns
 * nothing of the disk), and what a write that met a full disk teaches it: the next request measures the disk again.
 * Install before the routes are added (it hooks each as it is added).
 */
export function installStorageFloor(app: FastifyInstance, space: Pick<FreeSpace, 'admit' | 'sawFull'>): void {
  const floor: onRequestHookHandler = (_request, _reply, done) => {
    const waiting = space.admit();
    if (waiting === null) return done();
    waiting.then(() => done(), done);
  };
  app.addHook('onRoute', (route) => {
    const methods = [route.method].flat();
    if (!methods.some((method) => NEW_WORK_ROUTES.has(`${method} ${route.url}`))) return;
    route.onRequest = [...[route.onRequest ?? []].flat(), floor];
  });
  app.addHook('onError', (_request, _reply, error, done) => {
    if (storageFullError(error)) space.sawFull();
    done();
  });
}
