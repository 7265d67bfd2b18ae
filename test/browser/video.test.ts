import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CHROMIUM, hasChromium, launchChromium } from '../helpers/chromium.js';
import { dataKeptOnFailure, startMesh, type RunningMesh } from '../helpers/mesh.js';

/**
 * A clip in the gallery (web/) in a real headless Chromium against a real mesh: `gpumesh up`, its local agent,
 * the built-in generator and ffmpeg. The clip is submitted with the gallery link's own grant, which allows video.
 */

describe('a video in the gallery, in a browser', () => {
  let mesh: RunningMesh | undefined;
  let browser: Browser | undefined;
  let page: Page;
  const data = dataKeptOnFailure();

  beforeAll(async () => {
    expect(hasChromium(), `no Chromium at ${CHROMIUM} (npm run setup-tests)`).toBe(true);
    [mesh, browser] = await Promise.all([
      startMesh(),
      launchChromium(['--autoplay-policy=no-user-gesture-required']),
    ]);
    page = await browser.newPage({ viewport: { width: 1100, height: 800 } });
    data.ready();
  }, 90_000);

  afterAll(async () => {
    await browser?.close();
    await mesh?.stop();
    data.cleanUp(mesh);
  });

  it('shows the clip\'s poster and plays it in a <video>, fetched by range requests (206)', async () => {
    const gallery = mesh!.client(decodeURIComponent(new URL(mesh!.galleryUrl).hash.slice('#grant='.length)));
    const { id } = await gallery.submit({ type: 'video', input: { prompt: 'a paper boat on a pond', seed: 2, frames: 48, fps: 12, width: 128, height: 96, steps: 3 } });
    expect((await gallery.follow(id)).type).toBe('succeeded');
    const [video, poster] = (await gallery.job(id)).artifacts;
    expect(video!.mediaType).toBe('video/mp4');

    const mp4Answers: Array<{ status: number; range: string | null; acceptRanges: string | null }> = [];
    page.on('response', (response) => {
      if (!response.url().includes(video!.digest)) return;
      mp4Answers.push({ status: response.status(), range: response.request().headers().range ?? null, acceptRanges: response.headers()['accept-ranges'] ?? null });
    });
    const pageErrors: string[] = [];
    page.on('pageerror', (error) => pageErrors.push(error.message));
    await page.goto(mesh!.galleryUrl);

    const card = page.locator(`.card.video[data-job-id="${id}"]`);
    await card.waitFor();
    // One card for the clip: its poster is the video's, not a card of its own.
    expect(await page.locator(`.card[data-job-id="${id}"]`).count()).toBe(1);
    expect(await card.locator('.prompt').textContent()).toBe('a paper boat on a pond');
    const element = card.locator('video');
    // The poster is shown as its thumbnail (made by the orchestrator, never larger than the picture).
    expect(await element.getAttribute('poster')).toContain(`/v1/blobs/${poster!.digest}/thumbnail?width=512&access_token=`);
    expect(await element.getAttribute('src')).toContain(`/v1/blobs/${video!.digest}?access_token=`);
    // The poster is a real image the browser can show.
    const posterSize = await page.evaluate(async (src) => {
      const img = new Image();
      img.src = src;
      await img.decode();
      return [img.naturalWidth, img.naturalHeight];
    }, (await element.getAttribute('poster'))!);
    expect(posterSize).toEqual([128, 96]);

    await element.evaluate((node: HTMLVideoElement) => node.play());
    // It plays: enough data to render (HAVE_CURRENT_DATA or more) and the clock runs.
    await page.waitForFunction((selector) => {
      const node = document.querySelector<HTMLVideoElement>(selector);
      return node !== null && node.readyState >= 2 && node.currentTime > 0.3 && !node.paused;
    }, `.card.video[data-job-id="${id}"] video`, { timeout: 20_000 });
    const state = await element.evaluate((node: HTMLVideoElement) => ({ width: node.videoWidth, height: node.videoHeight, duration: node.duration, error: node.error?.code ?? null }));
    expect(state).toEqual({ width: 128, height: 96, duration: 4, error: null });
    // Chromium's media stack asks for ranges, and the blob route answers them.
    expect(mp4Answers.some((answer) => answer.status === 206 && answer.range?.startsWith('bytes=') && answer.acceptRanges === 'bytes'), JSON.stringify(mp4Answers)).toBe(true);
    expect(pageErrors).toEqual([]);
    await page.screenshot({ path: '/tmp/gallery-video.png' });
  }, 90_000);

  it('a clip made while the page is open shows its frames counting, then takes its placeholder\'s place', async () => {
    await page.evaluate(() => {
      const win = window as unknown as { __labels: string[] };
      win.__labels = [];
      new MutationObserver(() => {
        for (const state of document.querySelectorAll('.card.pending .state')) {
          const text = state.textContent ?? '';
          if (!win.__labels.includes(text)) win.__labels.push(text);
        }
      }).observe(document.getElementById('grid')!, { childList: true, subtree: true, characterData: true });
    });
    const gallery = mesh!.client(decodeURIComponent(new URL(mesh!.galleryUrl).hash.slice('#grant='.length)));
    const { id } = await gallery.submit({ type: 'video', input: { prompt: 'a kite over the dunes', seed: 8, frames: 36, fps: 12, width: 128, height: 128, steps: 4 } });
    await page.locator(`.card.video[data-job-id="${id}"] video`).waitFor();
    expect(await page.locator(`.card[data-job-id="${id}"]`).count()).toBe(1);
    const labels = await page.evaluate(() => (window as unknown as { __labels: string[] }).__labels);
    expect(labels.some((label) => /^Frame \d+ of 36$/.test(label)), labels.join(' | ')).toBe(true);
  }, 60_000);
});
