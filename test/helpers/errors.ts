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

/** The MeshError a promise rejects with (anything else fails the test). */
export async function meshRejection(promise: Promise<unknown>): Promise<MeshError> {
  try {
    await promise;
  } catch (error) {
    if (error instanceof MeshError) return error;
    throw error;
  }
  throw new Error('expected a MeshError');
}
