import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { albumsWithArtifacts, deleteArtifactsOfJob, insertArtifact, listArtifacts } from '../../../../src/orchestrator/store/sqlite/artifacts.js';
import type { ArtifactFilter } from '../../../../src/orchestrator/store/index.js';
import { openDb, type Db } from '../../../../src/orchestrator/store/sqlite/db.js';
import { insertJob } from '../../../../src/orchestrator/store/sqlite/jobs.js';

/**
 * The gallery's listing with 10,000 results, rows inserted straight through the store: keyset pages see every
 * result once, the album filter reads its index, and a page costs the same deep in the gallery as at its top. The
 * figures (bench/gallery.ts measures them at more sizes) are in bench/RESULTS.md; the time bound here is loose
 * enough never to flake — what holds the speed is the query plan, which is asserted exactly.
 */
const RESULTS = 10_000;
const PAGE = 48;
const ALBUMS = ['default', 'cats', 'dogs', 'rare'];

function fill(db: Db, count: number): void {
  db.transaction(() => {
    for (let i = 0; i < count; i++) {
      const id = `j_${String(i).padStart(8, '0')}`;
      // One result in a hundred is in `rare`; prompts name their number, and every 1,000th says "lighthouse".
      const album = i % 100 === 0 ? 'rare' : ALBUMS[i % 3]!;
      const prompt = i % 1000 === 0 ? `a lighthouse at dusk, number ${i}` : `picture number ${i}`;
      insertJob(db, { id, type: 'image', model: 'gen', priority: 2, album, classes: ['image'], input: { prompt, seed: i, width: 64, height: 64, steps: 2 }, grantId: 'g', idempotencyKey: null, createdAt: i, deadlineAt: null });
      insertArtifact(db, {
        digest: `sha256:${i.toString(16).padStart(64, '0')}`, jobId: id, type: 'image', model: 'gen', host: 'vm', album, mediaType: 'image/png',
        bytes: 1000, width: 64, height: 64, computeMs: 5, totalMs: 9, energyJ: null, createdAt: i,
      });
    }
  })();
}

/** The median time of `runs` runs of `fn`, in ms. */
function median(fn: () => unknown, runs = 15): number {
  const times: number[] = [];
  for (let k = 0; k < runs; k++) {
    const start = process.hrtime.bigint();
    fn();
    times.push(Number(process.hrtime.bigint() - start) / 1e6);
  }
  return times.sort((a, b) => a - b)[Math.floor(runs / 2)]!;
}

const plan = (db: Db, sql: string, ...args: unknown[]): string =>
  (db.prepare(`EXPLAIN QUERY PLAN ${sql}`).all(...args) as { detail: string }[]).map((row) => row.detail).join('\n');

describe(`the gallery's listing with ${RESULTS.toLocaleString('en')} results`, () => {
  let dir: string;
  let db: Db;

  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), 'gpumesh-gallery-'));
    db = openDb(join(dir, 'store.sqlite'));
    fill(db, RESULTS);
  });

  afterAll(() => {
    db.close();
    rmSync(dir, { recursive: true, force: true });
  });

  const page = (filter: Partial<ArtifactFilter> = {}) => listArtifacts(db, { types: null, models: null, albums: null, limit: PAGE, ...filter });

  it('walks every result once, newest first, page by page (keyset)', () => {
    const seen: number[] = [];
    let before: number | undefined;
    for (;;) {
      const rows = page({ beforeSeq: before });
      seen.push(...rows.map((row) => row.seq));
      if (rows.length < PAGE) break;
      before = rows.at(-1)!.seq;
    }
    expect(seen).toHaveLength(RESULTS);
    expect(new Set(seen).size).toBe(RESULTS);
    expect(seen).toEqual([...seen].sort((a, b) => b - a));
  });

  it('filters by album (its index) and by prompt, and knows the albums there are', () => {
    expect(page({ albums: ['rare'] }).every((row) => row.album === 'rare')).toBe(true);
    expect(page({ albums: ['rare'], limit: 1000 })).toHaveLength(100);
    const found = page({ prompt: 'LIGHTHOUSE' });
    expect(found.map((row) => row.prompt)).toEqual(Array.from({ length: 10 }, (_, k) => `a lighthouse at dusk, number ${(9 - k) * 1000}`));
    // LIKE's own characters are taken literally.
    expect(page({ prompt: '100%' })).toEqual([]);
    expect(page({ prompt: 'number_1' })).toEqual([]);
    expect(albumsWithArtifacts(db)).toEqual(['cats', 'default', 'dogs', 'rare']);
  });

  it('reads a page from the index, deep in the gallery as at its top: no sort, no scan of other albums', () => {
    const select = 'SELECT a.seq FROM artifacts a JOIN jobs j ON j.id = a.job_id';
    const top = plan(db, `${select} ORDER BY a.seq DESC LIMIT 48`);
    expect(top).not.toMatch(/TEMP B-TREE/);
    const deep = plan(db, `${select} WHERE a.seq < ? ORDER BY a.seq DESC LIMIT 48`, 100);
    expect(deep).toMatch(/SEARCH a USING INTEGER PRIMARY KEY \(rowid<\?\)/);
    expect(deep).not.toMatch(/TEMP B-TREE/);
    const album = plan(db, `${select} WHERE a.album IN (?) AND a.seq < ? ORDER BY a.seq DESC LIMIT 48`, 'rare', 100);
    expect(album).toMatch(/USING (COVERING )?INDEX artifacts_by_album/);
    expect(album).not.toMatch(/TEMP B-TREE/);
    expect(plan(db, 'SELECT DISTINCT album FROM artifacts ORDER BY album')).toMatch(/COVERING INDEX artifacts_by_album/);
  });

  it('answers a page fast at the top and at the bottom (loose bound; figures in bench/RESULTS.md)', () => {
    const oldest = page({ beforeSeq: 60 });
    expect(oldest.length).toBe(PAGE);
    const times = {
      top: median(() => page()),
      deep: median(() => page({ beforeSeq: 500 })),
      album: median(() => page({ albums: ['cats'], beforeSeq: 5000 })),
      rareAlbum: median(() => page({ albums: ['rare'] })),
      search: median(() => page({ prompt: 'lighthouse' })),
    };
    console.log(`gallery listing, ${RESULTS} results, median ms per page of ${PAGE}:`, times);
    for (const ms of Object.values(times)) expect(ms).toBeLessThan(250);
  });

  it('forgets a deleted job\'s results', () => {
    expect(deleteArtifactsOfJob(db, 'j_00000007')).toEqual([`sha256:${(7).toString(16).padStart(64, '0')}`]);
    expect(page({ prompt: 'number 7', limit: 200 }).map((row) => row.jobId)).not.toContain('j_00000007');
  });
});
