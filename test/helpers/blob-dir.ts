import { readdirSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';

/**
 * Everything under a mesh's blob folder (`<data>/blobs`: the blobs by digest, staged uploads, spools), each file with
 * its size and each folder with a trailing `/`, relative and sorted: what a refused request must leave as it found it.
 */
export function blobDirEntries(data: string): string[] {
  const root = join(data, 'blobs');
  const entries: string[] = [];
  const walk = (dir: string): void => {
    for (const entry of readdirSync(dir, { withFileTypes: true })) {
      const path = join(dir, entry.name);
      if (entry.isDirectory()) {
        entries.push(`${relative(root, path)}/`);
        walk(path);
      } else {
        entries.push(`${relative(root, path)} ${statSync(path).size}`);
      }
    }
  };
  walk(root);
  return entries.sort();
}

/** The path under `<data>/blobs` where the local store keeps a digest's bytes, as `blobDirEntries` names it (with its size). */
export function blobEntry(digest: string, bytes: number): string {
  const hex = digest.slice('sha256:'.length);
  return `${join('sha256', hex.slice(0, 2), hex)} ${bytes}`;
}
