import type { FastifyRequest } from 'fastify';
import { z } from 'zod';
import { LIMITS, MeshError } from '../../../protocol/index.js';
import type { ClientBlobs } from '../../blobs/client-blobs.js';
import { grantOf } from '../auth.js';
import { judgedStart, type CarriedPicture, type PictureStart } from '../image-jobs.js';
import { unreadable } from '../multipart.js';

/**
 * What an OpenAI images request asks for, once read (JSON for generations, multipart for edits): the one shape the
 * handler runs. Fields OpenAI has and gpumesh has no use for (quality, style, background, moderation, user) are
 * accepted and left out; gpumesh's own knobs (seed, steps, strength, negative_prompt) may ride along.
 */
export interface ImagesRequest {
  prompt: string;
  model?: string;
  n: number;
  size: { width: number; height: number } | null;
  responseFormat: 'url' | 'b64_json';
  outputFormat: 'png' | 'jpeg' | 'webp';
  /** 0–100, for jpeg and webp. */
  compression: number | null;
  stream: boolean;
  partialImages: number;
  seed?: number;
  steps?: number;
  negativePrompt?: string;
  strength?: number;
}

const nullable = <T extends z.ZodType>(schema: T) => schema.nullish().transform((value) => value ?? undefined);

/** The fields both routes share, as OpenAI names them. */
const Common = {
  prompt: z.string().trim().min(1, 'prompt must not be empty').max(LIMITS.promptChars),
  model: nullable(z.string().min(1).max(100)),
  n: nullable(z.coerce.number().int().min(1).max(LIMITS.imagesPerRequest)),
  size: nullable(z.string().max(20)),
  response_format: nullable(z.enum(['url', 'b64_json'])),
  output_format: nullable(z.enum(['png', 'jpeg', 'webp'])),
  output_compression: nullable(z.coerce.number().int().min(0).max(100)),
  stream: nullable(z.union([z.boolean(), z.enum(['true', 'false']).transform((text) => text === 'true')])),
  partial_images: nullable(z.coerce.number().int().min(0).max(3)),
  quality: nullable(z.string().max(20)),
  style: nullable(z.string().max(20)),
  background: nullable(z.string().max(20)),
  moderation: nullable(z.string().max(20)),
  input_fidelity: nullable(z.string().max(20)),
  user: nullable(z.string().max(256)),
  // gpumesh's own
  seed: nullable(z.coerce.number().int().min(0).max(0xffffffff)),
  steps: nullable(z.coerce.number().int().min(LIMITS.steps.min).max(LIMITS.steps.max)),
  negative_prompt: nullable(z.string().max(LIMITS.promptChars)),
};

export const GenerationBody = z.strictObject(Common);
/** An edit's text fields (its files come as parts of their own). */
export const EditFields = z.strictObject({ ...Common, strength: nullable(z.coerce.number().min(0).max(1)) });

/** `WxH` within gpumesh's image limits, or `auto` (the model's default, or the picture's size for an edit). */
function parseSize(size: string | undefined): { width: number; height: number } | null {
  if (size === undefined || size === 'auto') return null;
  const match = /^(\d{1,5})x(\d{1,5})$/.exec(size);
  const { min, max } = LIMITS.imageSide;
  const width = Number(match?.[1]);
  const height = Number(match?.[2]);
  if (!match || width < min || width > max || height < min || height > max) {
    throw new MeshError('VALIDATION_FAILED', { detail: `size: "${size}" is not auto or WIDTHxHEIGHT with each side from ${min} to ${max} (e.g. 512x512, 1024x1024)` });
  }
  return { width, height };
}

/** Parse a request's fields (zod's issues named as OpenAI's params) into the one shape the handler runs. */
export function readImagesRequest(schema: typeof GenerationBody | typeof EditFields, fields: unknown): ImagesRequest {
  const parsed = schema.safeParse(fields);
  if (!parsed.success) {
    const detail = parsed.error.issues.map((issue) => {
      const field = issue.path.join('.') || 'body';
      return issue.code === 'unrecognized_keys' ? `${issue.keys.join(', ')}: not a parameter of this route` : `${field}: ${issue.message}`;
    }).join('; ');
    throw new MeshError('VALIDATION_FAILED', { detail });
  }
  const body = parsed.data;
  if (body.partial_images && !body.stream) {
    throw new MeshError('VALIDATION_FAILED', { detail: 'partial_images: needs stream: true (partial images arrive as events of the stream)' });
  }
  if (body.output_compression !== undefined && (body.output_format ?? 'png') === 'png') {
    throw new MeshError('VALIDATION_FAILED', { detail: 'output_compression: applies to output_format jpeg or webp, not png' });
  }
  return {
    prompt: body.prompt,
    ...(body.model !== undefined ? { model: body.model } : {}),
    n: body.n ?? 1,
    size: parseSize(body.size),
    // A stream carries its pictures as base64 whatever was asked; a plain answer gives URLs unless told otherwise.
    responseFormat: body.stream ? 'b64_json' : body.response_format ?? 'url',
    outputFormat: body.output_format ?? 'png',
    compression: body.output_compression ?? null,
    stream: body.stream ?? false,
    partialImages: body.partial_images ?? 0,
    ...(body.seed !== undefined ? { seed: body.seed } : {}),
    ...(body.steps !== undefined ? { steps: body.steps } : {}),
    ...(body.negative_prompt !== undefined ? { negativePrompt: body.negative_prompt } : {}),
    ...('strength' in body && typeof body.strength === 'number' ? { strength: body.strength } : {}),
  };
}

/** An edit, read whole: what it asks, where it starts (its pictures judged, not stored), and how to let go of them. */
export interface EditRequest {
  ask: ImagesRequest;
  start: PictureStart;
  /** Remove the pictures' files in hand (nothing once they are stored): call when the request is done, however it ended. */
  discard(): Promise<void>;
}

/**
 * An edit's multipart body, read and checked whole before anything is stored: its text fields, and one picture to
 * start from (`image` or `image[]`: gpumesh's image-to-image starts from one) and at most one `mask`, each hashed into
 * a file in hand — further pictures are counted and drained, never kept — and decoded (IMAGE_REFUSED naming the
 * field). The pictures are stored only once the jobs are admitted (`CarriedPictures`), so a refused edit stores
 * nothing.
 */
export async function readEdit(request: FastifyRequest, clientBlobs: ClientBlobs): Promise<EditRequest> {
  const fields: Record<string, string> = {};
  const received: CarriedPicture[] = [];
  const counts = { image: 0, mask: 0 };
  const discard = async (): Promise<void> => {
    await Promise.all(received.map(({ incoming }) => clientBlobs.discard(incoming)));
  };
  try {
    const parts = request.parts()[Symbol.asyncIterator]();
    for (;;) {
      const next = await parts.next().catch((error: unknown) => {
        throw unreadable(error);
      });
      if (next.done) break;
      const part = next.value;
      if (part.type === 'field') {
        // A field sent as application/json arrives parsed: a number or a flag is taken as its text, a list or an object
        // is no field of an edit (and String() of one nested deep would overflow the stack).
        if (part.value !== null && typeof part.value === 'object') {
          throw new MeshError('VALIDATION_FAILED', { detail: `${part.fieldname}: a text field, not a JSON ${Array.isArray(part.value) ? 'list' : 'object'}` });
        }
        fields[part.fieldname] = String(part.value);
        continue;
      }
      const field = part.fieldname.replace(/\[\]$/, '');
      if (field !== 'image' && field !== 'mask') {
        part.file.resume();
        throw new MeshError('VALIDATION_FAILED', { detail: `${part.fieldname}: not a file this route takes (image, image[], mask)` });
      }
      if (counts[field]++ > 0) {
        part.file.resume();
        continue;
      }
      const declared = { mediaType: part.mimetype, ...(part.filename ? { filename: part.filename } : {}) };
      const incoming = await clientBlobs.receive(part.file).catch((error: unknown) => {
        throw unreadable(error);
      });
      received.push({ field, label: field, incoming, declared });
    }
    const ask = readImagesRequest(EditFields, fields);
    if (counts.image !== 1) {
      throw new MeshError('VALIDATION_FAILED', { detail: `image: ${counts.image === 0 ? 'an edit needs the picture to start from' : `${counts.image} pictures; gpumesh's image-to-image starts from one`}` });
    }
    if (counts.mask > 1) throw new MeshError('VALIDATION_FAILED', { detail: `mask: ${counts.mask} masks; an edit takes one` });
    const start = await judgedStart(clientBlobs, grantOf(request).id, received);
    return { ask, start, discard };
  } catch (error) {
    await discard();
    throw error;
  }
}
