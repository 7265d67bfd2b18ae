/**
 * Turn V8 CPU profiles (`node --cpu-prof`) into flame graphs (SVG) and a
 * table of the heaviest functions by self time.
 *
 *   node --import tsx bench/flame.ts <profile.cpuprofile> [--out file.svg] [--title "…"]
 *
 * A flame graph stacks callers below callees; a frame's width is the share of
 * samples in which it was on the stack. Idle and GC time are kept as frames of
 * their own so "mostly idle" shows as such.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { basename } from 'node:path';
import { parseArgs } from 'node:util';

export interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  children?: number[];
}

export interface CpuProfile {
  nodes: ProfileNode[];
  samples: number[];
  timeDeltas: number[];
  startTime: number;
  endTime: number;
}

interface Frame {
  name: string;
  self: number;
  total: number;
  children: Map<string, Frame>;
}

const newFrame = (name: string): Frame => ({ name, self: 0, total: 0, children: new Map() });

/** A short, readable frame name: function and file (within the project or package), with the line. */
export function frameName(node: Pick<ProfileNode, 'callFrame'>): string {
  const { functionName, url, lineNumber } = node.callFrame;
  const fn = functionName || '(anonymous)';
  if (!url) return fn;
  const path = url.replace(/^file:\/\//, '');
  const inPackage = /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(path)?.[1];
  const where = inPackage ? inPackage : path.includes('/src/') ? path.slice(path.indexOf('/src/') + 1) : path.startsWith('node:') ? path : basename(path);
  return `${fn} ${where}:${lineNumber + 1}`;
}

/** Build the call tree weighted by sample time (µs). */
export function callTree(profile: CpuProfile): Frame {
  const byId = new Map(profile.nodes.map((node) => [node.id, node]));
  const parent = new Map<number, number>();
  for (const node of profile.nodes) for (const child of node.children ?? []) parent.set(child, node.id);
  const root = newFrame('all');
  profile.samples.forEach((id, index) => {
    const weight = profile.timeDeltas[index + 1] ?? profile.timeDeltas[index] ?? 0;
    const stack: string[] = [];
    for (let at: number | undefined = id; at !== undefined; at = parent.get(at)) {
      const node = byId.get(at)!;
      if (node.callFrame.functionName !== '(root)') stack.push(frameName(node));
    }
    stack.reverse();
    let frame = root;
    root.total += weight;
    for (const name of stack) {
      let child = frame.children.get(name);
      if (!child) frame.children.set(name, (child = newFrame(name)));
      child.total += weight;
      frame = child;
    }
    frame.self += weight;
  });
  return root;
}

const escape = (text: string): string => text.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;');

/** Colour by where the frame's code lives: ours, a package, Node.js internals, V8/idle. */
function colour(name: string): string {
  if (name.includes(' src/')) return '#e8833a';
  if (/\(idle\)|\(program\)|\(garbage collector\)/.test(name)) return '#bbbbbb';
  if (name.includes('node:')) return '#6fa8dc';
  return '#f6c85f';
}

export function flameSvg(root: Frame, title: string): string {
  const width = 1600;
  const rowHeight = 17;
  const rows: string[] = [];
  let depthMax = 0;
  const draw = (frame: Frame, x: number, depth: number): void => {
    const w = (frame.total / root.total) * width;
    if (w < 0.5) return;
    depthMax = Math.max(depthMax, depth);
    const y = depth * rowHeight;
    const pct = ((frame.total / root.total) * 100).toFixed(2);
    const label = w > 40 ? escape(frame.name.slice(0, Math.floor(w / 6.5))) : '';
    rows.push(`<g><title>${escape(frame.name)} — ${pct}% (${(frame.total / 1000).toFixed(1)} ms)</title>`
      + `<rect x="${x.toFixed(1)}" y="__Y${y}__" width="${w.toFixed(1)}" height="${rowHeight - 1}" fill="${colour(frame.name)}" rx="2"/>`
      + (label ? `<text x="${(x + 3).toFixed(1)}" y="__T${y}__" font-size="11" font-family="monospace">${label}</text>` : '') + '</g>');
    let childX = x;
    for (const child of [...frame.children.values()].sort((a, b) => a.name.localeCompare(b.name))) {
      draw(child, childX, depth + 1);
      childX += (child.total / root.total) * width;
    }
  };
  draw(root, 0, 0);
  const height = (depthMax + 1) * rowHeight + 40;
  // Flame graphs grow upwards: the root at the bottom.
  const body = rows.join('\n')
    .replace(/__Y(\d+)__/g, (_all, y: string) => String(height - 20 - Number(y) - rowHeight))
    .replace(/__T(\d+)__/g, (_all, y: string) => String(height - 20 - Number(y) - 5));
  return `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}">
<rect width="100%" height="100%" fill="#ffffff"/>
<text x="4" y="14" font-size="13" font-family="sans-serif">${escape(title)} — ${(root.total / 1000).toFixed(0)} ms sampled (orange: gpumesh, yellow: packages, blue: Node.js, grey: idle/GC)</text>
${body}
</svg>
`;
}

/** The heaviest functions by self time. */
export function heaviest(root: Frame, top = 25): { name: string; selfMs: number; pct: number }[] {
  const self = new Map<string, number>();
  const walk = (frame: Frame): void => {
    self.set(frame.name, (self.get(frame.name) ?? 0) + frame.self);
    for (const child of frame.children.values()) walk(child);
  };
  walk(root);
  return [...self].sort((a, b) => b[1] - a[1]).slice(0, top)
    .map(([name, us]) => ({ name, selfMs: us / 1000, pct: (us / root.total) * 100 }));
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const { values, positionals } = parseArgs({ allowPositionals: true, options: { out: { type: 'string' }, title: { type: 'string' } } });
  const input = positionals[0];
  if (!input) {
    process.stderr.write('usage: flame.ts <profile.cpuprofile> [--out file.svg] [--title text]\n');
    process.exit(2);
  }
  const root = callTree(JSON.parse(readFileSync(input, 'utf8')) as CpuProfile);
  const out = values.out ?? input.replace(/\.cpuprofile$/, '.svg');
  writeFileSync(out, flameSvg(root, values.title ?? basename(input)));
  for (const row of heaviest(root)) process.stdout.write(`${row.pct.toFixed(1).padStart(5)}%  ${row.selfMs.toFixed(1).padStart(8)} ms  ${row.name}\n`);
  process.stdout.write(`wrote ${out}\n`);
}
