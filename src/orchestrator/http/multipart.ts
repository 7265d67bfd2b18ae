import { MeshError } from '../../protocol/index.js';

/**
 * What an error met while reading the multipart body means. The parser's own (busboy's: no boundary, a boundary that
 * never comes, a body that ends inside a part, a malformed part header) are plain Errors: the body is the client's
 * mistake, a 400 — never a 500. Ours (MeshError: a file over the limit), @fastify/multipart's (with their status: a
 * limit, a field named like a prototype key) and the system's (with a code: a full disk's ENOSPC, which the error
 * handlers answer as STORAGE_FULL) keep their meaning; a body cut off by the client (the stream closed early) is 400.
 */
export function unreadable(error: unknown): unknown {
  if (error instanceof MeshError || !(error instanceof Error)) return error;
  const { code, statusCode } = error as { code?: unknown; statusCode?: unknown };
  if (code === 'ERR_STREAM_PREMATURE_CLOSE') return new MeshError('BAD_REQUEST', { detail: 'the multipart body ended before its last part did' }, { cause: error });
  if (typeof code === 'string' || typeof statusCode === 'number') return error;
  return new MeshError('BAD_REQUEST', { detail: `the multipart body cannot be read (${error.message})` }, { cause: error });
}

