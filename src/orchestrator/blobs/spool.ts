import { createHash } from 'node:crypto';
import { once } from 'node:events';
import { createWriteStream } from 'node:fs';
import type { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { MeshError } from '../../protocol/index.js';
import type { StoredBytes } from './blob-store.js';

/**
 * Write `source` to the file `temp`, hashing it on the way, and answer its digest and size; past `limit` bytes it
 * throws PAYLOAD_TOO_LARGE. With `expected`, bytes that hash otherwise throw DIGEST_MISMATCH once all are in. The
 * caller owns `temp` (and removes it however this ends). Both stores write a stream this way before anything is
 * published under a digest.
 */
export async function spoolHashed(source: Readable, temp: string, options: { expected?: string; limit?: number } = {}): Promise<StoredBytes> {
  const hash = createHash('sha256');
  let bytes = 0;
  const limit = options.limit ?? Infinity;
  const file = createWriteStream(temp);
  try {
    await pipeline(
      source,
    async function* (chunks: AsyncIterable<Buffer>) {
      for await (const chunk of chunks) {
        bytes += chunk.length;
        if (bytes > limit) throw new MeshError('PAYLOAD_TOO_LARGE', { limit });
        hash.update(chunk);
        yield chunk;
      }
    },
      file,
    );
  } catch (error) {
    // The file may still be opening when the pipeline fails (a body refused at its first chunk): the caller removes
    // it once this settles, so settle only once the stream has closed — else the file appears after its removal.
    if (!file.closed) await once(file, 'close');
    throw error;
  }
  const digest = `sha256:${hash.digest('hex')}`;
  if (options.expected !== undefined && options.expected !== digest) {
    throw new MeshError('DIGEST_MISMATCH', { expected: options.expected, actual: digest });
  }
  return { digest, bytes };
}
