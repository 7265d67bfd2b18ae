import { createHash } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { open, readFile, stat } from 'node:fs/promises';
import { basename } from 'node:path';
import type { StoredBlob, UploadView } from '../../protocol/api/index.js';
import { ApiError, type MeshClient } from './client.js';

/** Bytes per chunk of a resumable upload: large enough to keep the link busy, small enough that a drop costs little. */
const CHUNK_BYTES = 8 * 1024 * 1024;
/** Tries of one chunk, each resuming where the orchestrator says the upload stands. */
const CHUNK_TRIES = 5;

/** A file stored as the orchestrator answers it, and whether it had these bytes already (then nothing was sent). */
export type UploadedFile = StoredBlob & { deduplicated: boolean };

/**
 * Store a file in the mesh by digest, as a resumable upload: its SHA-256 first (a file the orchestrator has already is
 * not sent again), then chunks, each resumed after a dropped connection at the offset the orchestrator reached.
 * `onProgress` hears the bytes sent so far.
 */
export async function uploadFile(client: MeshClient, path: string, onProgress: (sent: number, total: number) => void = () => {}): Promise<UploadedFile> {
  const { size } = await stat(path);
  const hash = createHash('sha256');
  for await (const chunk of createReadStream(path)) hash.update(chunk as Buffer);
  const digest = `sha256:${hash.digest('hex')}`;
  if (await readable(client, digest)) return { digest, bytes: size, mediaType: 'application/octet-stream', deduplicated: true };
  const started = await client.request<UploadView>('POST', '/v1/uploads', { bytes: size });
  let stored: StoredBlob;
  try {
    const file = await open(path);
    try {
      let offset = 0;
      while (offset < size) {
        const chunk = Buffer.alloc(Math.min(CHUNK_BYTES, size - offset));
        await file.read(chunk, 0, chunk.length, offset);
        offset = await sendChunk(client, started.id, offset, new Uint8Array(chunk));
        onProgress(offset, size);
      }
    } finally {
      await file.close();
    }
    stored = await client.request<StoredBlob>('POST', `/v1/uploads/${started.id}/complete`);
  } catch (error) {
    // This command will not resume the upload (another run starts a new one): its bytes so far go now, not after a
    // week. Best effort — an orchestrator out of reach keeps them until its next start after that week.
    await client.send('DELETE', `/v1/uploads/${started.id}`, undefined).catch(() => undefined);
    throw error;
  }
  if (stored.digest !== digest) throw new ApiError(0, 'DIGEST_MISMATCH', `the orchestrator stored ${stored.digest}, not ${digest}: the file changed while it was sent`);
  return { ...stored, deduplicated: false };
}

/** Pictures up to this size go in one `PUT /v1/blobs`, their file name with them (a .png that is not a PNG is refused). */
const ONE_REQUEST_BYTES = CHUNK_BYTES;

/**
 * Store a picture a job starts from (`--input image=./photo.png`): one request with its name when it is small,
 * else a resumable upload (sent only when the grant cannot read the same bytes already). The orchestrator decodes it,
 * and refuses it (IMAGE_REFUSED) if it is not a picture it takes or its name says another type — so a small one is
 * sent with its name even when the bytes are known; `deduplicated` then says they were.
 */
export async function uploadPicture(client: MeshClient, path: string): Promise<UploadedFile> {
  const { size } = await stat(path);
  if (size > ONE_REQUEST_BYTES) return uploadFile(client, path);
  const bytes = new Uint8Array(await readFile(path));
  const known = await readable(client, createDigest(bytes));
  const name = basename(path).replace(/["\\\r\n]/g, '_');
  const stored = await client.send<StoredBlob>('PUT', '/v1/blobs', bytes, {
    'content-type': 'application/octet-stream', 'content-disposition': `attachment; filename="${name}"`,
  });
  return { ...stored, deduplicated: known };
}

const createDigest = (bytes: Uint8Array): string => `sha256:${createHash('sha256').update(bytes).digest('hex')}`;

/** Whether the grant can read a blob of this digest already (then its bytes need not be sent). */
async function readable(client: MeshClient, digest: string): Promise<boolean> {
  try {
    await client.send('HEAD', `/v1/blobs/${digest}`, undefined);
    return true;
  } catch (error) {
    if (error instanceof ApiError && error.status === 404) return false;
    throw error;
  }
}

/**
 * Delete files this command stored (not those the mesh had already) once what they were for was refused: a job the
 * orchestrator did not take. Best effort: one that cannot be deleted now stays, and a retry finds it by digest.
 */
export async function deleteStored(client: MeshClient, files: readonly UploadedFile[]): Promise<void> {
  for (const file of files) {
    if (!file.deduplicated) await client.send('DELETE', `/v1/blobs/${file.digest}`, undefined).catch(() => undefined);
  }
}

/** Send one chunk; after a drop, ask where the upload stands and send the rest of the chunk from there. */
async function sendChunk(client: MeshClient, id: string, offset: number, chunk: Uint8Array<ArrayBuffer>): Promise<number> {
  const end = offset + chunk.length;
  let at = offset;
  for (let attempt = 1; ; attempt++) {
    try {
      const state = await client.send<UploadView>('PATCH', `/v1/uploads/${id}`, chunk.subarray(at - offset), { 'upload-offset': String(at), 'content-type': 'application/octet-stream' });
      if (state.offset >= end) return state.offset;
      at = state.offset;
    } catch (error) {
      const retryable = error instanceof ApiError && (error.status === 0 || error.status === 409 || error.status >= 500);
      if (!retryable || attempt >= CHUNK_TRIES) throw error;
      at = (await client.request<UploadView>('GET', `/v1/uploads/${id}`)).offset;
      if (at >= end) return at;
    }
  }
}
