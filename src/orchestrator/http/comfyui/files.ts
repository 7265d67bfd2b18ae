import { Readable } from 'node:stream';
import type { FastifyReply, FastifyRequest } from 'fastify';
import sharp from 'sharp';
import { z } from 'zod';
import { LIMITS, MeshError } from '../../../protocol/index.js';
import type { Incoming } from '../../blobs/client-blobs.js';
import { servedAs } from '../../blobs/output-media.js';
import { grantOf } from '../auth.js';
import { unreadable } from '../multipart.js';
import { digestOfFileName, fileNameOf } from './outputs.js';
import type { ComfyDoorDeps } from './routes.js';

const ViewQuery = z.looseObject({
  filename: z.string().max(300),
  subfolder: z.string().max(300).optional(),
  type: z.enum(['output', 'input', 'temp']).optional(),
});

/**
 * `GET /view?filename=&subfolder=&type=`: a file the door named — a job's result (`output`, a preview node's `temp`)
 * that the grant may read as it may read any blob, or a picture its lineage uploaded (`input`) — with its image or
 * video type, never anything that could run as a page of this origin. Any other name is 404, as ComfyUI answers.
 */
export async function view(request: FastifyRequest, reply: FastifyReply, deps: Pick<ComfyDoorDeps, 'reader' | 'outputs' | 'visibility' | 'clientBlobs'>): Promise<FastifyReply> {
  const parsed = ViewQuery.safeParse(request.query);
  const digest = parsed.success ? digestOfFileName(parsed.data.filename.split('/').at(-1)!) : null;
  const notFound = new MeshError('NOT_FOUND', { what: `File ${parsed.success ? parsed.data.filename.slice(0, 100) : ''}` });
  if (!parsed.success || !digest) throw notFound;
  const grant = grantOf(request);
  if (parsed.data.type === 'input') {
    if (!(await deps.clientBlobs.storedBy(digest, grant.id))) throw notFound;
  } else {
    await deps.visibility.assertVisible(grant, digest);
  }
  const record = await deps.outputs.blobRecord(digest);
  const served = servedAs(record?.mediaType);
  if (!record || !served.inline) throw notFound;
  const blob = await deps.reader.open(digest, record.bytes);
  const body = await blob.read();
  return reply.headers({
    'content-type': served.contentType,
    'content-disposition': `filename="${fileNameOf(digest, record.mediaType)}"`,
    'x-content-type-options': 'nosniff',
    'content-security-policy': "default-src 'none'; sandbox",
    'cache-control': 'private, max-age=31536000, immutable',
    'content-length': String(blob.size),
  }).send(body);
}

/** An upload's fields as ComfyUI's `image_upload` reads them. */
const UploadFields = z.looseObject({
  subfolder: z.string().max(200).optional(),
  type: z.enum(['input', 'temp', 'output']).optional(),
  overwrite: z.string().max(10).optional(),
  original_ref: z.string().max(2000).optional(),
});

const OriginalRef = z.looseObject({ filename: z.string().max(300), subfolder: z.string().max(300).optional(), type: z.string().max(20).optional() });

/** The multipart body of an upload: its text fields and its `image` part, hashed into a file in hand. */
async function readUpload(request: FastifyRequest, deps: Pick<ComfyDoorDeps, 'clientBlobs'>): Promise<{ fields: Record<string, string>; image: Incoming | null; declared: string }> {
  if (!request.isMultipart()) throw new MeshError('VALIDATION_FAILED', { detail: 'image: an upload is multipart/form-data with the picture as the file part "image"' });
  const fields: Record<string, string> = {};
  let image: Incoming | null = null;
  let declared = '';
  try {
    for await (const part of request.parts()) {
      if (part.type === 'field') {
        if (part.value !== null && typeof part.value === 'object') throw new MeshError('VALIDATION_FAILED', { detail: `${part.fieldname}: a text field` });
        fields[part.fieldname] = String(part.value);
      } else if (part.fieldname === 'image' && image === null) {
        declared = part.mimetype;
        image = await deps.clientBlobs.receive(part.file);
      } else {
        part.file.resume();
      }
    }
  } catch (error) {
    if (image) await deps.clientBlobs.discard(image);
    throw unreadable(error);
  }
  return { fields, image, declared };
}

/**
 * `POST /upload/image` and `/upload/mask` as ComfyUI's server.py takes them (multipart `image`, `subfolder`, `type`,
 * `overwrite`; a mask's `original_ref`): the picture decoded under the mesh's limits and stored as the caller's (a
 * client blob, as `PUT /v1/blobs` stores one), named by its digest so a workflow that names it names those bytes. A
 * mask is what ComfyUI makes of one: the picture `original_ref` names with the mask's alpha as its own.
 */
export async function upload(request: FastifyRequest, deps: Pick<ComfyDoorDeps, 'clientBlobs' | 'reader' | 'outputs' | 'visibility'>, mask: boolean): Promise<{ name: string; subfolder: string; type: string }> {
  const grant = grantOf(request);
  const { fields, image, declared } = await readUpload(request, deps);
  if (!image) throw new MeshError('VALIDATION_FAILED', { detail: 'image: the upload has no file part "image"' });
  try {
    const parsed = UploadFields.safeParse(fields);
    if (!parsed.success) throw new MeshError('VALIDATION_FAILED', { detail: parsed.error.issues.map((issue) => `${issue.path.join('.')}: ${issue.message}`).join('; ') });
    const { subfolder = '', type = 'input', original_ref: originalRef } = parsed.data;
    let stored: { digest: string; mediaType: string };
    try {
      const mediaType = await deps.clientBlobs.judge(image, { mediaType: declared }, true);
      stored = mask && originalRef !== undefined
        ? await maskOver(request, image, originalRef, deps) ?? await deps.clientBlobs.take(grant.id, image, { mediaType })
        : await deps.clientBlobs.take(grant.id, image, { mediaType });
    } catch (error) {
      if (error instanceof MeshError && error.code === 'IMAGE_REFUSED') throw new MeshError('IMAGE_REFUSED', { detail: `image: ${String(error.params.detail)}` });
      throw error;
    }
    return { name: fileNameOf(stored.digest, stored.mediaType), subfolder, type };
  } finally {
    await deps.clientBlobs.discard(image);
  }
}

/**
 * The picture `original_ref` names with the mask's alpha laid over it (PIL's putalpha, as ComfyUI's upload_mask),
 * stored as the caller's; null when it names no picture the grant may read (ComfyUI then keeps the mask as sent).
 */
async function maskOver(request: FastifyRequest, mask: Incoming, originalRef: string, deps: Pick<ComfyDoorDeps, 'clientBlobs' | 'reader' | 'outputs' | 'visibility'>): Promise<{ digest: string; mediaType: string } | null> {
  let reference: z.infer<typeof OriginalRef>;
  try {
    reference = OriginalRef.parse(JSON.parse(originalRef));
  } catch {
    throw new MeshError('VALIDATION_FAILED', { detail: 'original_ref: a JSON object naming the picture ({"filename", "subfolder", "type"})' });
  }
  const digest = digestOfFileName(reference.filename.split('/').at(-1)!);
  const grant = grantOf(request);
  if (!digest) return null;
  const readable = reference.type === 'input' || reference.type === undefined ? await deps.clientBlobs.storedBy(digest, grant.id) : true;
  if (!readable) return null;
  try {
    await deps.visibility.assertVisible(grant, digest);
  } catch {
    return null;
  }
  const record = await deps.outputs.blobRecord(digest);
  if (!record?.mediaType.startsWith('image/')) return null;
  const limit = { limitInputPixels: LIMITS.inputImage.maxPixels };
  const original = sharp(await deps.reader.bytes(digest, record.bytes), limit).removeAlpha();
  const { width, height } = await original.metadata();
  const alpha = await sharp(mask.path, limit).ensureAlpha().extractChannel('alpha').resize(width, height, { fit: 'fill' }).raw().toBuffer();
  const png = await original.joinChannel(alpha, { raw: { width: width!, height: height!, channels: 1 } }).png().toBuffer();
  return deps.clientBlobs.put(grant.id, Readable.from([png]), { mediaType: 'image/png' });
}
