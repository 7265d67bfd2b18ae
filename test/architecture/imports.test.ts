import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ROOT } from '../helpers/mesh.js';

/**
 * The import graph of `src/`, folder by folder (each side's public entry a node of its own, see ENTRIES), read from the
 * sources themselves: every `import … from`, `export … from` and `import()` of a relative path. The rules
 * (docs/architecture.md, "Module map"): `protocol/` is the only ground the orchestrator and the agent share — neither
 * imports the other —; no folder depends, through any chain, on a folder that depends on it; and no arrow points up:
 * `net/` (the HTTP client, the backoff, the link's plumbing) builds on `protocol/` alone, and in the agent `core/` (the
 * engine contract, EngineError, timers) imports no other agent folder while `governance/` and `video/`, below the
 * engines, import none of `engines/`.
 */
const SRC = join(ROOT, 'src');
const SPECIFIER = /(?:import|export)\s[^'";]*?from\s+['"](\.{1,2}\/[^'"]+)['"]|import\(\s*['"](\.{1,2}\/[^'"]+)['"]\s*\)/g;

function sources(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    return entry.isDirectory() ? sources(path) : entry.name.endsWith('.ts') ? [path] : [];
  });
}

/**
 * Each side's public entry (what the CLI starts it through) re-exports from the side's folders, the side's root among
 * them, and stands above them all: it is a node of its own, so a folder that imports the side's root (the standby
 * starts the facade) is not a cycle with it. Nothing inside a side imports its entry; if something did, the cycle shows.
 */
const ENTRIES = new Set(['orchestrator/index.ts', 'agent/index.ts']);

/** The node a file belongs to: its folder, or the entry it is. */
const nodeOf = (path: string): string => {
  const file = relative(SRC, path).replace(/\.js$/, '.ts');
  return ENTRIES.has(file) ? file : relative(SRC, dirname(path)) || '.';
};

/** Folder → the folders its files import (a folder's own files are not edges), with one example import per edge. */
function folderGraph(): Map<string, Map<string, string>> {
  const graph = new Map<string, Map<string, string>>();
  for (const file of sources(SRC)) {
    const from = nodeOf(file);
    for (const match of readFileSync(file, 'utf8').matchAll(SPECIFIER)) {
      const to = nodeOf(resolve(dirname(file), match[1] ?? match[2]!));
      if (to === from) continue;
      if (!graph.has(from)) graph.set(from, new Map());
      if (!graph.get(from)!.has(to)) graph.get(from)!.set(to, `${relative(SRC, file)} imports ${match[1] ?? match[2]}`);
    }
  }
  return graph;
}

/** Strongly connected groups of more than one folder (Tarjan). */
function cycles(graph: Map<string, Map<string, string>>): string[][] {
  let next = 0;
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const found: string[][] = [];
  const visit = (node: string): void => {
    index.set(node, next);
    low.set(node, next++);
    stack.push(node);
    onStack.add(node);
    for (const to of graph.get(node)?.keys() ?? []) {
      if (!index.has(to)) {
        visit(to);
        low.set(node, Math.min(low.get(node)!, low.get(to)!));
      } else if (onStack.has(to)) low.set(node, Math.min(low.get(node)!, index.get(to)!));
    }
    if (low.get(node) !== index.get(node)) return;
    const group: string[] = [];
    let member: string;
    do {
      member = stack.pop()!;
      onStack.delete(member);
      group.push(member);
    } while (member !== node);
    if (group.length > 1) found.push(group.sort());
  };
  for (const node of graph.keys()) if (!index.has(node)) visit(node);
  return found;
}

const top = (folder: string): string => folder.split('/')[0]!;

describe('the import graph of src/', () => {
  const graph = folderGraph();

  it('the orchestrator and the agent never import each other: protocol/ is their shared ground', () => {
    const crossings: string[] = [];
    for (const [from, edges] of graph) {
      for (const [to, example] of edges) {
        const pair = `${top(from)}→${top(to)}`;
        if (pair === 'orchestrator→agent' || pair === 'agent→orchestrator') crossings.push(example);
      }
    }
    expect(crossings).toEqual([]);
  });

  it('no arrow points up: net/ builds on protocol/ alone; agent/core/ on no other agent folder; governance/ and video/ on no engine', () => {
    const upward: string[] = [];
    const within = (folder: string, root: string): boolean => folder === root || folder.startsWith(`${root}/`);
    for (const [from, edges] of graph) {
      for (const [to, example] of edges) {
        const up = (within(from, 'net') && !within(to, 'protocol'))
          || (within(from, 'agent/core') && within(to, 'agent'))
          || ((within(from, 'agent/governance') || within(from, 'agent/video')) && within(to, 'agent/engines'));
        if (up) upward.push(example);
      }
    }
    expect(upward).toEqual([]);
  });

  it('no folder depends on itself through other folders', () => {
    const described = cycles(graph).map((group) => {
      const inside = new Set(group);
      const edges = group.flatMap((from) => [...(graph.get(from) ?? [])].filter(([to]) => inside.has(to)).map(([, example]) => example));
      return `${group.join(' ↔ ')}:\n    ${edges.join('\n    ')}`;
    });
    expect(described).toEqual([]);
  });
});
