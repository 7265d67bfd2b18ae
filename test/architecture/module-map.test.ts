import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ROOT } from '../helpers/mesh.js';

/**
 * docs/architecture.md's module map (the code block under "## Modules") against the tree, so the two cannot drift:
 * every folder of `src/` that holds a tracked file has its own line, and every path the map names exists.
 *
 * How the map is read: it is a tree, two spaces a level. A line whose first word is a file or folder name (`link.ts`,
 * `jobs/`) followed by two spaces or the end of the line is an entry, the child of the nearest folder entry above it
 * with less indentation; any other line continues the entry above. Names in the text (`store/cursors.ts`, `http/`)
 * are read from the entry's folder, then each folder above it up to the repository's root, and must exist in one.
 */
const MAP_HEADING = '## Modules';
const NAME = String.raw`[\w.-]+(?:/|\.(?:ts|js|mjs|sh|html|css|md|json))`;
const ENTRY = new RegExp(String.raw`^( *)(${NAME})(?:  +\S|$)`);
/** A path in the text: folders ending in `/`, or a file with its extension; not part of a URL, a route or `<data>/…`. */
const MENTION = new RegExp(
  String.raw`(?<![\w/.:@<>$~\-])((?:[\w.-]+/)+(?:[\w.-]+\.(?:ts|js|mjs|sh|html|css|md|json))?|[a-z0-9][\w-]*(?:\.[\w-]+)*\.(?:ts|js|mjs|sh|html|css|md|json))(?![\w/])`,
  'g',
);

interface Line {
  number: number;
  text: string;
  /** The folder names on this line are read from (repository-relative, '' for the root, else ending in `/`). */
  folder: string;
  /** The path of the entry this line names, if it is an entry. */
  entry?: string;
}

function mapLines(): Line[] {
  const doc = readFileSync(join(ROOT, 'docs/architecture.md'), 'utf8').split('\n');
  const heading = doc.indexOf(MAP_HEADING);
  expect(heading, `docs/architecture.md has a "${MAP_HEADING}" section`).toBeGreaterThanOrEqual(0);
  const open = doc.findIndex((line, index) => index > heading && line.startsWith('```'));
  const close = doc.findIndex((line, index) => index > open && line.startsWith('```'));
  expect(open > heading && close > open, 'the module map is a code block under "## Modules"').toBe(true);

  const folders: { indent: number; path: string }[] = [];
  let folder = '';
  return doc.slice(open + 1, close).map((text, index) => {
    const number = open + 2 + index;
    const match = ENTRY.exec(text);
    if (!match) return { number, text, folder };
    const indent = match[1]!.length;
    while (folders.length > 0 && folders.at(-1)!.indent >= indent) folders.pop();
    const parent = folders.at(-1)?.path ?? '';
    const entry = parent + match[2]!;
    if (entry.endsWith('/')) folders.push({ indent, path: entry });
    folder = entry.endsWith('/') ? entry : parent;
    return { number, text: text.slice(indent + match[2]!.length), folder, entry };
  });
}

function tracked(): { files: Set<string>; folders: Set<string> } {
  const files = new Set(execFileSync('git', ['ls-files'], { cwd: ROOT, encoding: 'utf8' }).split('\n').filter(Boolean));
  const folders = new Set<string>();
  for (const file of files) {
    const parts = file.split('/');
    for (let i = 1; i < parts.length; i++) folders.add(`${parts.slice(0, i).join('/')}/`);
  }
  return { files, folders };
}

/** The folder and each folder above it, to the root (''). */
const upwards = (folder: string): string[] => {
  const parts = folder.split('/').filter(Boolean);
  return parts.map((_, i) => `${parts.slice(0, parts.length - i).join('/')}/`).concat('');
};

describe("docs/architecture.md's module map", () => {
  const lines = mapLines();
  const { files, folders } = tracked();
  const exists = (path: string): boolean => (path.endsWith('/') ? folders.has(path) : files.has(path));

  it('names every folder of src/ on a line of its own', () => {
    const named = new Set(lines.flatMap((line) => (line.entry ? [line.entry] : [])));
    const missing = [...folders].filter((folder) => folder.startsWith('src/') && !named.has(folder)).sort();
    expect(missing).toEqual([]);
  });

  it('names only paths that exist', () => {
    const stale: string[] = [];
    for (const line of lines) {
      if (line.entry && !exists(line.entry)) stale.push(`line ${line.number}: ${line.entry}`);
      for (const match of line.text.matchAll(MENTION)) {
        const name = match[1]!;
        if (!upwards(line.folder).some((base) => exists(base + name))) stale.push(`line ${line.number}: ${name} (read from ${line.folder || 'the root'})`);
      }
    }
    expect(stale).toEqual([]);
  });
});
