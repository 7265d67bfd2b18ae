import { existsSync, readdirSync, statSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ROOT } from '../helpers/mesh.js';

/**
 * Unit tests mirror the source: a module's tests are found by its path (`src/orchestrator/routing/router.ts` →
 * `test/orchestrator/routing/router.test.ts`), so every folder that holds unit tests is a folder of `src/`. The folders
 * that test the whole rather than a module — integration/ (real processes), browser/ (real Chromium), fuzz/,
 * architecture/ (the checkout itself) — and the tests' own helpers/ and fixtures/ stand apart; web/ mirrors the
 * checkout's web/, which is not under src/.
 */
const TESTS = join(ROOT, 'test');
const APART = new Set(['integration', 'browser', 'fuzz', 'architecture', 'helpers', 'fixtures', 'web']);

function testFiles(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) return name === 'fixtures' ? [] : testFiles(path);
    return name.endsWith('.test.ts') ? [path] : [];
  });
}

describe('the tests\' layout', () => {
  const files = readdirSync(TESTS).filter((name) => !APART.has(name) && statSync(join(TESTS, name)).isDirectory()).flatMap((name) => testFiles(join(TESTS, name)));

  it('every unit test lives in the folder of src/ its module lives in', () => {
    const astray = files.map((file) => relative(TESTS, dirname(file))).filter((folder) => !existsSync(join(ROOT, 'src', folder)));
    expect([...new Set(astray)].map((folder) => `test/${folder}/ has no src/${folder}/`)).toEqual([]);
  });

  it('finds the tests it judges', () => {
    expect(files.some((file) => file.endsWith('test/orchestrator/routing/router.test.ts'))).toBe(true);
    expect(files.length).toBeGreaterThan(80);
  });
});
