import { MeshError } from '../../src/protocol/index.js';

/** Run `fn`, which must throw a MeshError; return it. */
export function meshErrorOf(fn: () => void): MeshError {
  try {
    fn();
  } catch (error) {
    if (error instanceof MeshError) return error;
    throw error;
  }
  throw new Error('expected a MeshError');
}
