import type { FastifyInstance } from 'fastify';
import { LIMITS, MeshError } from '../../protocol/index.js';

/**
 * Whether a parsed JSON value nests arrays and objects more than `limit` levels deep (the value itself is level 1).
 * Counted with a stack of its own, never by recursion: this is what stands between a 100,000-deep array and every
 * recursive walk after it (zod, JSON.stringify, Array.prototype.flat), so it must not overflow itself.
 */
export function nestsDeeperThan(value: unknown, limit: number): boolean {
  if (value === null || typeof value !== 'object') return false;
  const nodes: object[] = [value];
  const depths: number[] = [1];
  while (nodes.length > 0) {
    const node = nodes.pop()!;
    const depth = depths.pop()!;
    if (depth > limit) return true;
    if (Array.isArray(node)) {
      for (const child of node) {
        if (child !== null && typeof child === 'object') {
          nodes.push(child as object);
          depths.push(depth + 1);
        }
      }
    } else {
      for (const key in node) {
        const child = (node as Record<string, unknown>)[key];
        if (child !== null && typeof child === 'object') {
          nodes.push(child);
          depths.push(depth + 1);
        }
      }
    }
  }
  return false;
}

/** NESTING_TOO_DEEP for a value deeper than LIMITS.jsonDepth; `where` names what it is ("JSON body", "inference header"). */
export function assertJsonDepth(value: unknown, where: string): void {
  if (nestsDeeperThan(value, LIMITS.jsonDepth)) throw new MeshError('NESTING_TOO_DEEP', { where, limit: LIMITS.jsonDepth });
}

/**
 * Every parsed JSON body is held to LIMITS.jsonDepth before validation or a handler sees it (JSON.parse itself does
 * not recurse). Bodies a route reads itself (bytes, a stream, multipart) are not JSON here; those that hold JSON are
 * checked where they are parsed (the OIP's inference header).
 */
export function installJsonDepthLimit(app: FastifyInstance): void {
  app.addHook('preValidation', (request, _reply, done) => {
    const body = request.body;
    if (body !== null && typeof body === 'object' && !ArrayBuffer.isView(body) && nestsDeeperThan(body, LIMITS.jsonDepth)) {
      return done(new MeshError('NESTING_TOO_DEEP', { where: 'JSON body', limit: LIMITS.jsonDepth }));
    }
    done();
  });
}
