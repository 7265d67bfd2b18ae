import type { FastifyInstance, FastifyRequest } from 'fastify';
import { z } from 'zod';
import { MeshError } from '../../../protocol/index.js';
import type { ClientCancel, JobReads } from '../../jobs/index.js';
import { grantOf } from '../auth.js';
import { cmdFlags, optionsOf, samplers, schedulers, upscalers } from './answers.js';
import { checkpointOf, generate, LIVE_PREVIEWS, type A1111GenerateDeps } from './generate.js';
import { checkpointsFor } from './checkpoints.js';
import {
  Flags, IMG2IMG_DOCS, Loras, Named, Options, Progress, readDocs, Samplers, Schedulers, SdModels, SET_OPTIONS_DOCS, stopDocs, TXT2IMG_DOCS, Upscalers, Vaes,
} from './docs.js';
import { installA1111Errors, invalid } from './errors.js';
import { A1111Lineages } from './lineages.js';
import { progressOf, type Generation } from './progress.js';

/**
 * Where the door lives: at the orchestrator's root, where A1111 has it, because its clients (SillyTavern) replace the
 * whole path of the address they are given — a base URL of `<mesh>/a1111` would be lost.
 */
const A1111_BASE = '/sdapi/v1';

/** The largest img2img body: its pictures travel in the JSON, base64 (a third larger), a picture and a mask. */
const IMG2IMG_BODY_BYTES = 32 * 1024 * 1024;

export interface A1111RouteDeps extends Omit<A1111GenerateDeps, 'lineages' | 'version' | 'reads'> {
  reads: Pick<JobReads, 'viewOf' | 'mayRead'>;
  cancels: Pick<ClientCancel, 'cancel'>;
  /** The largest picture a client may store (server.uploadLimitBytes), which bounds img2img's body too. */
  uploadLimitBytes: number;
  version: string;
  /** The per-lineage state (chosen model, work being made); one is made when not given. */
  lineages?: A1111Lineages;
}

/** What every door route is about, for the grant's caveats: image jobs (a grant of `types video` is refused). */
const IMAGES = () => ({ jobType: 'image' });

/**
 * AUTOMATIC1111's web UI API (`/sdapi/v1`), so the clients that speak it — SillyTavern, Open WebUI, scripts — make
 * their pictures on the mesh's image jobs, whatever engine serves them. Every route needs a grant that may submit
 * image jobs (`/interrupt` and `/skip`: cancel them), checked before the body is read; answers and errors are in
 * A1111's shapes. The model a caller picks through the options, and its work in progress, are its grant lineage's.
 */
export function a1111Routes(app: FastifyInstance, deps: A1111RouteDeps): void {
  const { auth } = deps;
  const lineages = deps.lineages ?? new A1111Lineages();
  const generation: A1111GenerateDeps = { ...deps, lineages };
  // Grants as A1111's clients send them: Basic's password (or a Bearer token); or the door's own, where its owner opened it.
  const submit = auth.requireAtDoor('a1111', 'jobs:submit', IMAGES);
  const cancel = auth.requireAtDoor('a1111', 'jobs:cancel', IMAGES);
  const tags = ['a1111'];

  app.register(async (scope) => {
    installA1111Errors(scope);

    scope.get('/options', {
      schema: { tags, summary: 'A1111 options: sd_model_checkpoint is the caller\'s model (its lineage\'s choice, else the mesh\'s default image model)' },
      config: { openapi: readDocs('The options', Options) },
      onRequest: submit,
    }, async (request) => optionsOf(checkpointOf(grantOf(request), generation), LIVE_PREVIEWS));

    scope.post('/options', {
      schema: { tags, summary: 'A1111 options: sd_model_checkpoint switches the caller\'s model (for its whole grant lineage); other keys are accepted and ignored' },
      config: { openapi: SET_OPTIONS_DOCS },
      onRequest: submit,
    }, async (request, reply) => {
      const body = request.body;
      if (body === null || typeof body !== 'object' || Array.isArray(body)) throw invalid([], 'value is not a valid dict', 'type_error.dict');
      const named = (body as Record<string, unknown>).sd_model_checkpoint;
      if (named !== undefined && named !== null) {
        if (typeof named !== 'string') throw invalid(['sd_model_checkpoint'], 'str type expected', 'type_error.str');
        const grant = grantOf(request);
        lineages.choose(grant.id, checkpointOf(grant, generation, named)!.title);
      }
      return reply.type('application/json; charset=utf-8').send('null');
    });

    scope.post('/txt2img', {
      schema: { tags, summary: 'A1111 txt2img: batch_size × n_iter pictures of a prompt, made as the mesh\'s image jobs, answered when all have ended' },
      config: { openapi: TXT2IMG_DOCS },
      onRequest: submit,
    }, async (request, reply) => generate(request, reply, 'txt2img', generation));

    scope.post('/img2img', {
      schema: { tags, summary: 'A1111 img2img: pictures from init_images[0] (and an optional mask) by the mesh\'s image-to-image' },
      config: { openapi: IMG2IMG_DOCS },
      bodyLimit: Math.min(IMG2IMG_BODY_BYTES, 2 * Math.ceil((deps.uploadLimitBytes * 4) / 3) + 64 * 1024),
      onRequest: submit,
    }, async (request, reply) => generate(request, reply, 'img2img', generation));

    scope.get('/progress', {
      schema: {
        tags, summary: 'A1111 progress of the caller\'s pictures being made (every request of its grant lineage): share done, step, the newest preview',
        querystring: z.object({ skip_current_image: z.string().max(10).optional().describe('true: leave current_image out') }),
      },
      config: { openapi: readDocs('The progress', Progress) },
      onRequest: submit,
    }, async (request) => {
      const skip = (request.query as { skip_current_image?: string }).skip_current_image;
      const grant = grantOf(request);
      const mine = lineages.generations(grant.id, (record) => deps.reads.mayRead(grant, record));
      return progressOf(mine, deps.events.clock.now(), skip !== undefined && /^(1|on|t|true|y|yes)$/i.test(skip));
    });

    scope.post('/interrupt', {
      schema: { tags, summary: 'A1111 interrupt: cancel every picture of the caller\'s still being made; their requests answer with what was made' },
      config: { openapi: stopDocs('Cancelled (A1111 answers {})') },
      onRequest: cancel,
    }, async (request) => {
      await stop(request, lineages, deps, false);
      return {};
    });

    scope.post('/skip', {
      schema: { tags, summary: 'A1111 skip: cancel the caller\'s pictures being made on a host now; those still queued go on' },
      config: { openapi: stopDocs('Skipped (A1111 answers null)') },
      onRequest: cancel,
    }, async (request, reply) => {
      await stop(request, lineages, deps, true);
      return reply.type('application/json; charset=utf-8').send('null');
    });

    scope.get('/sd-models', {
      schema: { tags, summary: 'A1111 checkpoints: the image models this grant may use (title "<model> [<hash>]", model_name, hash, sha256)' },
      config: { openapi: readDocs('The image models this grant may use', SdModels) },
      onRequest: submit,
    }, async (request) => checkpointsFor(grantOf(request), deps.registry));

    const lists: [path: string, summary: string, schema: z.ZodType, answer: () => unknown][] = [
      ['/samplers', 'A1111 samplers: A1111\'s names, accepted and recorded in info (the engines run their own)', Samplers, samplers],
      ['/schedulers', 'A1111 schedule types: A1111\'s names, accepted and recorded in info', Schedulers, schedulers],
      ['/sd-vae', 'A1111 VAEs: none (each model has its own)', Vaes, () => []],
      ['/upscalers', 'A1111 upscalers: only "None" (the mesh has no hires fix)', Upscalers, upscalers],
      ['/latent-upscale-modes', 'A1111 latent upscale modes: none', Named, () => []],
      ['/loras', 'A1111 LoRAs: none', Loras, () => []],
      ['/cmd-flags', 'A1111 command-line flags: the few clients look at', Flags, cmdFlags],
    ];
    for (const [path, summary, schema, answer] of lists) {
      scope.get(path, { schema: { tags, summary }, config: { openapi: readDocs(summary, schema) }, onRequest: submit }, async () => answer());
    }
  }, { prefix: A1111_BASE });
}

/** Jobs `stop` passes over: one that ended meanwhile, and one this narrowing of the lineage's grant may not cancel. */
const PASSED_OVER = new Set(['JOB_NOT_CANCELLABLE', 'NOT_FOUND', 'GRANT_DENIED']);

/**
 * Cancel the caller's pictures being made — all of them (`/interrupt`), or those on a host now (`/skip`; if none is on
 * a host yet, the next one) — through the same check as `DELETE /v1/jobs/:id`. Their requests answer with what was
 * made.
 */
async function stop(request: FastifyRequest, lineages: A1111Lineages, deps: Pick<A1111RouteDeps, 'auth' | 'reads' | 'cancels'>, skip: boolean): Promise<void> {
  const grant = grantOf(request);
  const authorize = deps.auth.authorizer(request);
  const mine = lineages.generations(grant.id, (record) => deps.reads.mayRead(grant, record));
  const targets: [Generation, string][] = [];
  for (const generation of mine) {
    const ids = skip ? generation.unfinished(true) : generation.unfinished();
    for (const id of ids) targets.push([generation, id]);
  }
  if (skip && targets.length === 0) {
    const next = mine.map((generation) => [generation, generation.unfinished()[0]] as const).find(([, id]) => id !== undefined);
    if (next) targets.push([next[0], next[1]!]);
  }
  for (const [generation, id] of targets) {
    if (skip) generation.skipped = true;
    else generation.interrupted = true;
    try {
      await deps.cancels.cancel(grant, id, authorize);
    } catch (error) {
      if (!(error instanceof MeshError && PASSED_OVER.has(error.code))) throw error;
    }
  }
}
