import type { Browser } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { launchChromium } from '../helpers/chromium.js';
import { removeDir, startMesh, waitFor, type RunningMesh } from '../helpers/mesh.js';

/**
 * The mesh view says when the data folder's disk is low (below `storage.minFreeMB`: new uploads and jobs are refused),
 * in real Chromium against a real `gpumesh up` whose floor is set above any disk's size, so the disk is "low" at once.
 */
describe('the mesh view and a low disk', () => {
  let mesh: RunningMesh;
  let browser: Browser;

  beforeAll(async () => {
    [mesh, browser] = await Promise.all([startMesh({ config: { storage: { minFreeMB: 10_000_000 } } }), launchChromium()]);
  }, 120_000);
  afterAll(async () => {
    await browser?.close();
    await mesh?.stop();
    if (mesh) removeDir(mesh.data);
  });

  it('shows a disk tile in alert, saying new work is refused and how much must be free', async () => {
    const meshUrl = await waitFor(() => /^\s+mesh\s+(\S+)$/m.exec(mesh.output())?.[1], { what: 'gpumesh up to print the mesh link' });
    const page = await browser.newPage();
    await page.goto(meshUrl);
    const tile = page.locator('[data-tile="disk"]');
    await tile.waitFor();
    expect(await tile.getAttribute('data-alert')).toBe('yes');
    expect(await tile.getAttribute('role')).toBe('alert');
    expect(await tile.locator('.label').textContent()).toMatch(/^disk low: new uploads and jobs are refused until it has [\d.]+ (GiB|TiB) free$/);
    expect(await tile.locator('.value').textContent()).toMatch(/^[\d.]+ (GiB|TiB|MiB) free$/);
    // And the mesh means it: a job is refused with the same reason.
    const refused = await fetch(`${mesh.url}/v1/jobs`, {
      method: 'POST', headers: { authorization: `Bearer ${mesh.admin}`, 'content-type': 'application/json' },
      body: JSON.stringify({ type: 'image', input: { prompt: 'no room' } }),
    });
    expect(refused.status).toBe(507);
    await page.close();
  });
});
