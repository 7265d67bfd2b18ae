import type { FastifyReply, FastifyRequest } from 'fastify';
import { MeshError } from '../../../protocol/index.js';
import type { VerifiedGrant } from '../../auth/index.js';
import type { ClientBlobs } from '../../blobs/client-blobs.js';
import type { ModelRegistry } from '../../registry/index.js';
import { grantOf } from '../auth.js';
import { endedViews, jobFailure, pictureOfJob, randomSeed, seedOf, submitImages, type ImageJobsDeps } from '../image-jobs.js';
import { infoOf } from './answers.js';
import { checkpointsFor, findCheckpoint, type Checkpoint } from './checkpoints.js';
import type { A1111Lineages } from './lineages.js';
import { carriedStart } from './pictures.js';
import { readGeneration, type GenerationKind } from './requests.js';

export interface A1111GenerateDeps extends ImageJobsDeps {
  registry: ModelRegistry;
  clientBlobs: ClientBlobs;
  lineages: A1111Lineages;
  version: string;
}

/**
 * Previews each picture's job asks for (the most an image job takes): `/progress` answers the newest as
 * `current_image`, as A1111 does with its live previews on (its default).
 */
export const LIVE_PREVIEWS = 3;

/**
 * The checkpoint a request runs on: the one it names (`override_settings.sd_model_checkpoint`), else the one its
 * lineage chose, else the mesh's default image model — among the image models the grant may use. A named one the
 * grant may not use, or that does not exist, is UNKNOWN_MODEL listing those it may; a lineage's choice the grant may
 * no longer use falls back to the default. Null: the grant may use no image model.
 */
export function checkpointOf(grant: VerifiedGrant, deps: Pick<A1111GenerateDeps, 'registry' | 'lineages'>, named?: string): Checkpoint | null {
  const checkpoints = checkpointsFor(grant, deps.registry);
  if (named !== undefined) {
    const found = findCheckpoint(checkpoints, named);
    if (!found) throw new MeshError('UNKNOWN_MODEL', { model: named.slice(0, 200), known: knownTo(checkpoints) });
    return found;
  }
  const chosen = deps.lineages.checkpoint(grant.id);
  return (chosen === null ? undefined : findCheckpoint(checkpoints, chosen)) ?? checkpoints[0] ?? null;
}

const knownTo = (checkpoints: readonly Checkpoint[]): string => checkpoints.map((checkpoint) => checkpoint.title).join(', ') || 'no image model this grant may use';

/**
 * txt2img and img2img: the request read as A1111 reads it, its `batch_size × n_iter` pictures admitted as that many
 * image jobs of the checkpoint's model (seeds `seed + i`, as A1111's), followed for `/progress`, waited for, and
 * answered as A1111 does — the pictures (PNG, base64), the parameters as read, and `info`. Pictures `/interrupt` or
 * `/skip` cancelled are left out (A1111 answers what it made); any other job that did not succeed fails the request.
 */
export async function generate(request: FastifyRequest, reply: FastifyReply, kind: GenerationKind, deps: A1111GenerateDeps): Promise<unknown> {
  const grant = grantOf(request);
  const ask = readGeneration(kind, request.body);
  const checkpoint = checkpointOf(grant, deps, ask.checkpoint);
  if (!checkpoint) throw new MeshError('UNKNOWN_MODEL', { model: '(the default)', known: knownTo([]) });
  if (ask.checkpoint !== undefined && ask.keepCheckpoint) deps.lineages.choose(grant.id, checkpoint.title);
  const carried = ask.initImage !== undefined ? await carriedStart(deps.clientBlobs, grant.id, ask.initImage, ask.mask, ask.maskInvert) : null;
  try {
    const seed = ask.seed ?? randomSeed();
    const records = await submitImages(request, {
      prompt: ask.prompt,
      model: checkpoint.model_name,
      n: ask.batchSize * ask.nIter,
      seed,
      size: ask.size,
      ...(ask.steps !== undefined ? { steps: ask.steps } : {}),
      ...(ask.negativePrompt !== '' ? { negativePrompt: ask.negativePrompt } : {}),
      ...(ask.strength !== undefined ? { strength: ask.strength } : {}),
      previews: LIVE_PREVIEWS,
    }, carried?.start ?? null, deps);
    const generation = deps.lineages.start(grant.id, kind, records, deps.events);
    const views = await endedViews(records, reply, deps);
    const stopped = generation.interrupted || generation.skipped;
    const kept = views.filter((view) => !(stopped && view.status === 'cancelled'));
    const failed = kept.find((view) => view.status !== 'succeeded');
    if (failed) throw jobFailure(failed);
    const pictures = await Promise.all(kept.map((view) => pictureOfJob(view, deps.reader)));
    const seeds = records.map((_, index) => seedOf(seed, index));
    const input = views[0]!.input;
    const info = infoOf({
      request: ask, checkpoint, seeds, keptSeeds: views.flatMap((view, index) => (kept.includes(view) ? [seeds[index]!] : [])),
      width: pictures[0]?.width ?? Number(input.width ?? 0), height: pictures[0]?.height ?? Number(input.height ?? 0), steps: Number(input.steps ?? 0),
      timestamp: generation.timestamp, jobIds: records.map((record) => record.id), version: deps.version,
    });
    return { images: ask.sendImages ? pictures.map((picture) => picture.bytes.toString('base64')) : [], parameters: ask.parameters, info };
  } finally {
    await carried?.discard();
  }
}
