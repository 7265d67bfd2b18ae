import type { FastifyReply, FastifyRequest } from 'fastify';
import { Readable } from 'node:stream';
import sharp from 'sharp';
import type { JobView } from '../../../protocol/api/index.js';
import { isTerminal, MeshError } from '../../../protocol/index.js';
import { narrowGrant } from '../../auth/index.js';
import type { ClientBlobs } from '../../blobs/client-blobs.js';
import type { JobRecord } from '../../store/index.js';
import type { ModelRegistry } from '../../registry/index.js';
import { grantOf } from '../auth.js';
import { endedViews, jobFailure, pictureOfJob, randomSeed, submitImages, type ImageJobsDeps, type PictureStart } from '../image-jobs.js';
import { openSse } from '../sse.js';
import type { ImagesRequest } from './image-requests.js';
import { openAiErrorBody } from './errors.js';
import type { Clock } from '../../../protocol/clock.js';

export interface OpenAiImagesDeps extends ImageJobsDeps {
  registry: ModelRegistry;
  clientBlobs: ClientBlobs;
}

/** How long a `url` in an answer stays valid: a read-only grant for blobs, in the URL. */
const URL_GRANT_MS = 3600_000;
/** OpenAI's model names: clients send them by habit; each means the mesh's default image model unless one has the name. */
const OPENAI_MODEL_NAMES = new Set(['dall-e-2', 'dall-e-3', 'gpt-image-1', 'gpt-image-1-mini', 'gpt-image-1.5']);

type Operation = 'image_generation' | 'image_edit';

/**
 * Run an OpenAI images request on the mesh: `n` image jobs admitted together (one fused batch where the model
 * batches), then either one answer when all have ended, or — `stream: true` — OpenAI's events as they happen: the
 * refinement's previews as `…partial_image` (real pictures of the steps so far) and each picture as `…completed`.
 */
export async function runImages(request: FastifyRequest, reply: FastifyReply, ask: ImagesRequest, start: PictureStart | null, deps: OpenAiImagesDeps): Promise<unknown> {
  const grant = grantOf(request);
  const model = ask.model !== undefined && OPENAI_MODEL_NAMES.has(ask.model) && !deps.registry.family(ask.model) && !deps.registry.get(ask.model) ? undefined : ask.model;
  const records = await submitImages(request, {
    prompt: ask.prompt,
    ...(model !== undefined ? { model } : {}),
    n: ask.n,
    seed: ask.seed ?? randomSeed(),
    size: ask.size,
    ...(ask.steps !== undefined ? { steps: ask.steps } : {}),
    ...(ask.negativePrompt !== undefined ? { negativePrompt: ask.negativePrompt } : {}),
    // An edit with a mask repaints what the mask leaves transparent, whole, unless told otherwise.
    ...(start && (ask.strength !== undefined || start.mask) ? { strength: ask.strength ?? 1 } : {}),
    previews: ask.partialImages,
  }, start, deps);
  const operation: Operation = start ? 'image_edit' : 'image_generation';
  if (ask.stream) return streamImages(request, reply, ask, records, operation, deps);

  const views = await endedViews(records, reply, deps);
  const failed = views.find((view) => view.status !== 'succeeded');
  if (failed) throw jobFailure(failed);
  const pictures = await Promise.all(views.map((view) => pictureOf(view, ask, deps)));
  if (ask.responseFormat === 'b64_json') {
    return { created: Math.floor(deps.events.clock.now() / 1000), data: pictures.map((picture) => ({ b64_json: picture.bytes.toString('base64') })), ...answerFields(ask, pictures[0]!) };
  }
  // A converted picture is stored as the caller's, so the URL's read-only grant (a narrowing of it) may read it.
  const digests = await Promise.all(pictures.map(async (picture) => picture.digest ?? (await deps.clientBlobs.put(grant.id, Readable.from([picture.bytes]))).digest));
  const link = linkFor(request, deps.events.clock);
  return { created: Math.floor(deps.events.clock.now() / 1000), data: digests.map((digest) => ({ url: link(digest) })), ...answerFields(ask, pictures[0]!) };
}

/** The fields OpenAI's answer carries besides the pictures. */
function answerFields(ask: ImagesRequest, first: Picture): Record<string, string> {
  return {
    output_format: ask.outputFormat,
    size: `${first.width}x${first.height}`,
  };
}

interface Picture {
  bytes: Buffer;
  /** The bytes' digest when they are the stored artifact (a URL can point at them); null when converted. */
  digest: string | null;
  width: number;
  height: number;
}

/** A job's picture in the format asked for: the stored PNG, or converted. */
async function pictureOf(view: JobView, ask: ImagesRequest, deps: OpenAiImagesDeps): Promise<Picture> {
  const stored = await pictureOfJob(view, deps.reader);
  if (ask.outputFormat === 'png') return stored;
  const quality = ask.compression === null ? {} : { quality: Math.max(1, 100 - ask.compression) };
  const converted = ask.outputFormat === 'jpeg' ? await sharp(stored.bytes).jpeg(quality).toBuffer() : await sharp(stored.bytes).webp(quality).toBuffer();
  return { bytes: converted, digest: null, width: stored.width, height: stored.height };
}

/** URLs for blobs that work without a header for an hour: a read-only narrowing of the caller's grant, in the URL. */
function linkFor(request: FastifyRequest, clock: Clock): (digest: string) => string {
  const token = narrowGrant(request.grantToken!, ['actions blobs:read', `time-before ${new Date(clock.now() + URL_GRANT_MS).toISOString()}`]);
  const origin = `${request.protocol}://${request.host}`;
  return (digest) => `${origin}/v1/blobs/${digest}?access_token=${encodeURIComponent(token)}`;
}

/**
 * OpenAI's image stream: `<operation>.partial_image` for each preview the engine sends (`partial_image_index` counting
 * per picture), then `<operation>.completed` for each picture as its job ends; an `error` event if one fails.
 */
async function streamImages(request: FastifyRequest, reply: FastifyReply, ask: ImagesRequest, records: JobRecord[], operation: Operation, deps: OpenAiImagesDeps): Promise<void> {
  const unsubscribes: (() => void)[] = [];
  const sse = openSse(request, reply, () => unsubscribes.forEach((unsubscribe) => unsubscribe()), deps.events.clock);
  const common = { size: ask.size ? `${ask.size.width}x${ask.size.height}` : 'auto', quality: 'auto', background: 'opaque', output_format: ask.outputFormat };
  let open = records.length;
  const finished = (): void => {
    if (--open === 0) sse.close();
  };
  await new Promise<void>((resolve) => {
    const done = (): void => {
      finished();
      if (open === 0) resolve();
    };
    for (const [index, record] of records.entries()) {
      let partials = 0;
      let ended = false;
      const end = async (view: JobView): Promise<void> => {
        if (ended) return;
        ended = true;
        try {
          if (view.status !== 'succeeded') throw jobFailure(view);
          const picture = await pictureOf(view, ask, deps);
          sse.send(`${operation}.completed`, {
            type: `${operation}.completed`, b64_json: picture.bytes.toString('base64'), created_at: Math.floor(deps.events.clock.now() / 1000),
            ...common, size: `${picture.width}x${picture.height}`,
          });
        } catch (error) {
          const mesh = error instanceof MeshError ? error : new MeshError('INTERNAL', { detail: 'see the orchestrator log' }, { cause: error });
          sse.send('error', { type: 'error', ...openAiErrorBody(mesh) });
        }
        done();
      };
      unsubscribes.push(deps.events.subscribeJob(record.id, (scoped) => {
        const event = scoped.event;
        if (event.type === 'preview' && partials < ask.partialImages) {
          sse.send(`${operation}.partial_image`, {
            type: `${operation}.partial_image`, b64_json: event.b64, created_at: Math.floor(deps.events.clock.now() / 1000),
            ...common, partial_image_index: partials++, ...(records.length > 1 ? { image_index: index } : {}),
          });
        }
        if (isTerminal(record.status)) void deps.reads.viewOf(record).then(end);
      }));
      if (isTerminal(record.status)) void deps.reads.viewOf(record).then(end);
    }
  });
}
