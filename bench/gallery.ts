// The gallery's costs that grow with the gallery: a page of the listing (top, deep, one album, a search) at 10,000
// and 100,000 results, rows inserted straight through the store; and a thumbnail made with sharp from a 512×512 PNG,
// first and then from its cache. Prints a table and writes bench/out/gallery.json.
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import sharp from 'sharp';
import { Thumbnails } from '../src/orchestrator/gallery/thumbnails.js';
import { insertArtifact, listArtifacts } from '../src/orchestrator/store/sqlite/artifacts.js';
import type { ArtifactFilter } from '../src/orchestrator/store/index.js';
import { openDb, type Db } from '../src/orchestrator/store/sqlite/db.js';
import { insertJob } from '../src/orchestrator/store/sqlite/jobs.js';

const SIZES = [10_000, 100_000];
const PAGE = 48;
const RUNS = 31;

function fill(db: Db, count: number): void {
  db.transaction(() => {
    for (let i = 0; i < count; i++) {
      const id = `j_${String(i).padStart(8, '0')}`;
      const album = i % 100 === 0 ? 'rare' : ['default', 'cats', 'dogs'][i % 3]!;
      const prompt = i % 1000 === 0 ? `a lighthouse at dusk, number ${i}` : `picture number ${i} of a quiet harbour town`;
      insertJob(db, { id, type: 'image', model: 'gen', priority: 2, album, classes: ['image'], input: { prompt, seed: i, width: 512, height: 512, steps: 8 }, grantId: 'g', idempotencyKey: null, createdAt: i, deadlineAt: null });
      insertArtifact(db, {
        digest: `sha256:${i.toString(16).padStart(64, '0')}`, jobId: id, type: 'image', model: 'gen', host: 'vm', album, mediaType: 'image/png',
        bytes: 300_000, width: 512, height: 512, computeMs: 500, totalMs: 700, energyJ: null, createdAt: i,
      });
    }
  })();
}

function timeMs(fn: () => unknown): { p50: number; p90: number } {
  const times: number[] = [];
  for (let k = 0; k < RUNS; k++) {
    const start = process.hrtime.bigint();
    fn();
    times.push(Number(process.hrtime.bigint() - start) / 1e6);
  }
  times.sort((a, b) => a - b);
  return { p50: times[Math.floor(RUNS / 2)]!, p90: times[Math.floor(RUNS * 0.9)]! };
}

const rows: { size: number; query: string; p50: number; p90: number }[] = [];
for (const size of SIZES) {
  const dir = mkdtempSync(join(tmpdir(), 'gpumesh-bench-gallery-'));
  const db = openDb(join(dir, 'store.sqlite'));
  fill(db, size);
  const page = (filter: Partial<ArtifactFilter>) => () => listArtifacts(db, { types: null, models: null, albums: null, limit: PAGE, ...filter });
  const queries: [string, () => unknown][] = [
    ['newest page', page({})],
    ['deepest page', page({ beforeSeq: PAGE + 10 })],
    ['one album, mid-way', page({ albums: ['cats'], beforeSeq: size / 2 })],
    ['rare album (1 %)', page({ albums: ['rare'] })],
    ['search, common word', page({ prompt: 'harbour' })],
    ['search, 1 in 1,000', page({ prompt: 'lighthouse' })],
    ['search, no match', page({ prompt: 'zebra' })],
  ];
  for (const [query, fn] of queries) rows.push({ size, query, ...timeMs(fn) });
  db.close();
  rmSync(dir, { recursive: true, force: true });
}

// A thumbnail: a patterned 512×512 PNG, shrunk to 256 wide, five times (made, then from the cache).
const dir = mkdtempSync(join(tmpdir(), 'gpumesh-bench-thumbs-'));
mkdirSync(dir, { recursive: true });
const pixels = Buffer.alloc(512 * 512 * 3);
for (let i = 0; i < pixels.length; i++) pixels[i] = (i * 2654435761) >>> 24;
const png = await sharp(pixels, { raw: { width: 512, height: 512, channels: 3 } }).png().toBuffer();
const thumbnails = new Thumbnails({ dir, record: async () => ({ bytes: png.length, mediaType: 'image/png' }), open: async () => Readable.from([png]) });
const thumbRows: { what: string; ms: number; bytes: number }[] = [];
for (let n = 0; n < 5; n++) {
  const digest = `sha256:${String(n).padStart(64, '0')}`;
  let start = performance.now();
  const first = await thumbnails.get(digest, 256);
  thumbRows.push({ what: 'made (256)', ms: performance.now() - start, bytes: first.length });
  start = performance.now();
  const again = await thumbnails.get(digest, 256);
  thumbRows.push({ what: 'cached (256)', ms: performance.now() - start, bytes: again.length });
}
rmSync(dir, { recursive: true, force: true });
const median = (values: number[]): number => values.sort((a, b) => a - b)[Math.floor(values.length / 2)]!;

console.log(`\nGallery listing, page of ${PAGE}, ${RUNS} runs each (ms)\n`);
console.log('| results | query | p50 ms | p90 ms |\n| ---: | --- | ---: | ---: |');
for (const row of rows) console.log(`| ${row.size.toLocaleString('en')} | ${row.query} | ${row.p50.toFixed(2)} | ${row.p90.toFixed(2)} |`);
const made = thumbRows.filter((row) => row.what.startsWith('made'));
const cached = thumbRows.filter((row) => row.what.startsWith('cached'));
console.log(`\nThumbnail of a 512×512 PNG (${png.length.toLocaleString('en')} bytes) at 256 wide: made ${median(made.map((row) => row.ms)).toFixed(1)} ms, cached ${median(cached.map((row) => row.ms)).toFixed(2)} ms, ${made[0]!.bytes.toLocaleString('en')} bytes of WebP`);
mkdirSync('bench/out', { recursive: true });
writeFileSync('bench/out/gallery.json', JSON.stringify({ machine: { cpus: cpus().length, model: cpus()[0]?.model, node: process.version }, page: PAGE, runs: RUNS, rows, thumbnails: thumbRows, png: png.length }, null, 2));
