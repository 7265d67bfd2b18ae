import { randomInt } from 'node:crypto';
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { JobView } from '../../protocol/api/index.js';
import { familyOf, isTerminal, MeshError, type SubmitJobBody } from '../../protocol/index.js';
import type { VerifiedGrant } from '../auth/index.js';
import type { BlobReader } from '../blobs/blob-reader.js';
import type { CarriedPictures, ClientBlobs, Incoming } from '../blobs/client-blobs.js';
import type { EventBus } from '../events/event-bus.js';
import type { JobAdmission, JobReads } from '../jobs/index.js';
import type { RegisteredModel, ModelRegistry } from '../registry/index.js';
import type { JobRecord } from '../store/index.js';
import { grantOf, type RequestAuth } from './auth.js';
import { clientGone, jobEnd } from './prefer-wait.js';

/**
 * What the image front doors (OpenAI's images API, AUTOMATIC1111's `sdapi`) share: `n` image jobs of one prompt
 * admitted together, waited for, and their pictures read back — so a door only maps its own request and answer shapes.
 */
export interface ImageJobsDeps {
  admission: Pick<JobAdmission, 'submitAll'>;
  reads: Pick<JobReads, 'viewOf'>;
  events: EventBus;
  reader: BlobReader;
  auth: RequestAuth;
}

/** How long a door's request waits for its pictures (OpenAI's own clients wait ten minutes by default). */
export const IMAGES_WAIT_MS = 10 * 60_000;

/** `n` pictures of one prompt, as the mesh's image jobs take them. */
export interface ImageAsk {
  prompt: string;
  /** A model (or family) name; absent: the mesh's default image model. */
  model?: string;
  n: number;
  /** Picture `i` is made with `seed + i` (modulo 2³²). */
  seed: number;
  size: { width: number; height: number } | null;
  steps?: number;
  negativePrompt?: string;
  /** Image-to-image: how far the result may move from the start picture. */
  strength?: number;
  /** Pictures of the refinement so far, as `preview` events (0–3). */
  previews?: number;
}

/** Where image-to-image starts: the pictures the request carries, by digest — stored only once its jobs are admitted. */
export interface PictureStart {
  image: string;
  mask?: string;
  carried: CarriedPictures;
}

/** A seed for a request that named none: picture `i` takes `seed + i`, so it leaves room below 2³² for the others. */
export const randomSeed = (): number => randomInt(0, 0xffffffff - 64);

/** The seed picture `index` of a request is made with. */
export const seedOf = (first: number, index: number): number => (first + index) % 0x100000000;

/**
 * Admit a request's `n` image jobs together (one fused batch where the model batches; all or none), with the start
 * picture stored only once every check has passed.
 */
export async function submitImages(request: FastifyRequest, ask: ImageAsk, start: PictureStart | null, deps: ImageJobsDeps): Promise<JobRecord[]> {
  const bodies: SubmitJobBody[] = Array.from({ length: ask.n }, (_, index) => ({
    type: 'image',
    ...(ask.model !== undefined ? { model: ask.model } : {}),
    input: {
      prompt: ask.prompt,
      seed: seedOf(ask.seed, index),
      ...(ask.size ?? {}),
      ...(ask.steps !== undefined ? { steps: ask.steps } : {}),
      ...(ask.negativePrompt !== undefined ? { negativePrompt: ask.negativePrompt } : {}),
      ...(start ? { image: start.image, ...(start.mask ? { mask: start.mask } : {}) } : {}),
      ...(start && ask.strength !== undefined ? { strength: ask.strength } : {}),
      ...(ask.previews ? { previews: ask.previews } : {}),
    },
  }));
  return deps.admission.submitAll(grantOf(request), bodies, deps.auth.authorizer(request), start?.carried);
}

/**
 * Wait until every job has ended (or the client left, or IMAGES_WAIT_MS passed: 504, the jobs go on), and read their
 * views. Whether each succeeded is the caller's to judge.
 */
export async function endedViews(records: readonly JobRecord[], reply: FastifyReply, deps: Pick<ImageJobsDeps, 'events' | 'reads'>): Promise<JobView[]> {
  const gone = clientGone(reply);
  const ended = await Promise.all(records.map((record) => jobEnd(deps.events, record.id, IMAGES_WAIT_MS, () => isTerminal(record.status), gone)));
  if (ended.includes(false)) {
    throw new MeshError('AGENT_TIMEOUT', { host: 'the mesh', budgetMs: IMAGES_WAIT_MS, basis: `the jobs go on: ${records.map((record) => record.id).join(', ')}` });
  }
  return Promise.all(records.map((record) => deps.reads.viewOf(record)));
}

/** A job that did not succeed, as the error the client gets (its code and message in the message). */
export function jobFailure(view: JobView): MeshError {
  const error = view.error ?? { code: view.status.toUpperCase(), message: `the job ended ${view.status}` };
  return new MeshError('ENGINE_FAILED', { detail: `job ${view.id}: ${error.code}: ${error.message}` });
}

/** A job's picture as stored: its PNG's bytes, digest and size. */
export interface JobPicture {
  bytes: Buffer;
  digest: string;
  width: number;
  height: number;
}

/** The picture a succeeded image job made (ENGINE_FAILED if it made none). */
export async function pictureOfJob(view: JobView, reader: BlobReader): Promise<JobPicture> {
  const artifact = view.artifacts.find((candidate) => candidate.mediaType.startsWith('image/'));
  if (!artifact) throw new MeshError('ENGINE_FAILED', { detail: `job ${view.id} made no picture` });
  const bytes = await reader.bytes(artifact.digest, artifact.bytes);
  return { bytes, digest: artifact.digest, width: artifact.width ?? 0, height: artifact.height ?? 0 };
}

/** A model a grant may submit to, by the name a client uses: a model with versions by its family's name. */
export interface GrantedModel {
  name: string;
  /** The version the name describes now (`ModelRegistry.described`). */
  model: RegisteredModel;
}

/**
 * The models a grant may submit to — each family once, by its name — that serve `jobType` when one is given, else
 * any job type the grant may submit.
 */
export function grantedModels(grant: VerifiedGrant, registry: ModelRegistry, jobType?: string): GrantedModel[] {
  if (jobType !== undefined && grant.types && !grant.types.includes(jobType)) return [];
  const seen = new Set<string>();
  const out: GrantedModel[] = [];
  for (const model of registry.all()) {
    const name = familyOf(model.manifest.name);
    if (seen.has(name)) continue;
    if (grant.models && !grant.models.includes(name) && !grant.models.includes(model.manifest.name)) continue;
    const types = model.manifest.jobTypes;
    if (jobType !== undefined ? !types.includes(jobType) : grant.types && !types.some((type) => grant.types!.includes(type))) continue;
    seen.add(name);
    out.push({ name, model: registry.described(name) ?? model });
  }
  return out;
}

/** A picture a request carries, received into a file in hand (not stored), with what the client said it is. */
export interface CarriedPicture {
  field: 'image' | 'mask';
  /** How the request names it in an error (`image`, `init_images[0]`). */
  label: string;
  incoming: Incoming;
  declared: { mediaType?: string; filename?: string };
}

/**
 * Judge the pictures a request carries (decoded under the limits, IMAGE_REFUSED naming the one at fault) and make
 * them the start of image-to-image: stored only once the jobs are admitted (`CarriedPictures`), so a refused request
 * stores nothing. The files in hand are the caller's to discard, however the request ends.
 */
export async function judgedStart(clientBlobs: ClientBlobs, grantId: string, pictures: readonly CarriedPicture[]): Promise<PictureStart> {
  const judged: (CarriedPicture & { mediaType: string })[] = [];
  for (const picture of pictures) {
    try {
      judged.push({ ...picture, mediaType: await clientBlobs.judge(picture.incoming, picture.declared, true) });
    } catch (error) {
      if (error instanceof MeshError && error.code === 'IMAGE_REFUSED') throw new MeshError('IMAGE_REFUSED', { detail: `${picture.label}: ${String(error.params.detail)}` });
      throw error;
    }
  }
  const digestOf = (field: CarriedPicture['field']): string | undefined => judged.find((picture) => picture.field === field)?.incoming.digest;
  const image = digestOf('image');
  if (image === undefined) throw new MeshError('VALIDATION_FAILED', { detail: 'image: image-to-image needs the picture to start from' });
  const mask = digestOf('mask');
  return { image, ...(mask ? { mask } : {}), carried: clientBlobs.carry(grantId, judged) };
}
