import type { Readable } from 'node:stream';

/** Read a stream to its end or its error: the bytes that arrived, and the error if it failed. */
export async function drain(stream: Readable): Promise<{ bytes: Buffer; error: unknown }> {
  const chunks: Buffer[] = [];
  try {
    for await (const chunk of stream) chunks.push(chunk as Buffer);
    return { bytes: Buffer.concat(chunks), error: null };
  } catch (error) {
    return { bytes: Buffer.concat(chunks), error };
  }
}
