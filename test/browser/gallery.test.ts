import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ApiError } from '../../src/cli/common/client.js';
import { createHash } from 'node:crypto';
import type { JobView } from '../../src/protocol/api/index.js';
import { CHROMIUM, hasChromium, launchChromium, screenshotPath } from '../helpers/chromium.js';
import { dataKeptOnFailure, startMesh, waitFor, type RunningMesh } from '../helpers/mesh.js';
import { inspectGrant } from '../../src/protocol/grant-token.js';

/**
 * The gallery page (web/) in a real headless Chromium against a real mesh:
 * `gpumesh up`, its local agent and the built-in generator. Needs a Chromium
 * binary (Debian: `apt-get install chromium`); CHROMIUM_PATH overrides where.
 */
const SCREENSHOT = screenshotPath('gallery-refused-submission');

const cardOf = (jobId: string): string => `.card[data-job-id="${jobId}"][data-digest]`;

/** Whether the result card of `prompt` is in the grid with its image loaded. */
function resultShown(prompt: string): boolean {
  return [...document.querySelectorAll<HTMLElement>('.card[data-digest]')].some((card) => {
    const img = card.querySelector('img');
    return card.querySelector('.prompt')?.textContent === prompt && img !== null && img.complete && img.naturalWidth > 0;
  });
}

describe('the gallery page in a browser', () => {
  it('has a Chromium to drive (npm run setup-tests installs Debian\'s)', () => {
    expect(hasChromium(), `no Chromium at ${CHROMIUM}`).toBe(true);
  });

  let mesh: RunningMesh | undefined;
  let browser: Browser | undefined;
  let page: Page;
  let seedJob: string;
  const pageErrors: string[] = [];
  const data = dataKeptOnFailure();

  beforeAll(async () => {
    [mesh, browser] = await Promise.all([
      startMesh(),
      launchChromium(),
    ]);
    // At least one result exists before the page opens.
    const client = mesh.client();
    seedJob = (await client.submit({ type: 'image', input: { prompt: 'seed card', width: 64, height: 64, steps: 2 } })).id;
    expect((await client.follow(seedJob)).type).toBe('succeeded');
    page = await browser.newPage({ viewport: { width: 1100, height: 800 } });
    page.on('pageerror', (error) => pageErrors.push(error.message));
    // The page's CSP refuses inline scripts and styles: a refusal is a bug in the page.
    page.on('console', (message) => { if (message.type() === 'error' && /Content Security Policy/.test(message.text())) pageErrors.push(message.text()); });
    data.ready();
  });

  afterAll(async () => {
    await browser?.close();
    await mesh?.stop();
    data.cleanUp(mesh);
  });

  it('takes the grant from the link, hides it, and shows the newest results', async () => {
    await page.goto(mesh!.galleryUrl);
    const card = page.locator(cardOf(seedJob));
    await card.locator('img').waitFor();
    await page.waitForFunction((selector) => (document.querySelector(`${selector} img`) as HTMLImageElement | null)?.naturalWidth, cardOf(seedJob));

    expect(page.url()).toBe(`${mesh!.url}/`);
    const grant = new URL(mesh!.galleryUrl).hash.slice('#grant='.length);
    expect(await page.evaluate(() => Object.values(sessionStorage))).toContain(grant);

    await expect.poll(() => card.locator('.prompt').textContent()).toBe('seed card');
    const text = await card.textContent();
    expect(text).toContain('gen');
    expect(text).toMatch(/\d+\.\d\d s compute · \d+\.\d\d s total/);
    expect(await card.locator('img').getAttribute('alt')).toBe('seed card');
    await expect.poll(() => page.locator('#connection').textContent()).toBe('Live');

    // The grant in the picture's URL is not the page's: a narrowing that may only read, for an hour.
    const linkGrant = new URL((await card.locator('img').getAttribute('src'))!, mesh!.url).searchParams.get('access_token')!;
    expect(linkGrant).not.toBe(decodeURIComponent(grant));
    expect(inspectGrant(linkGrant).caveats).toEqual(expect.arrayContaining(['actions jobs:read,artifacts:read,blobs:read', expect.stringMatching(/^time-before /)]));
    const submitted = await fetch(`${mesh!.url}/v1/jobs`, {
      method: 'POST', headers: { authorization: `Bearer ${linkGrant}`, 'content-type': 'application/json' },
      body: JSON.stringify({ type: 'image', input: { prompt: 'from a leaked URL' } }),
    });
    expect(submitted.status).toBe(403);
    expect(pageErrors).toEqual([]);
  });

  it('shows a submitted prompt as a new card without reloading', async () => {
    const prompt = `a lighthouse at dusk ${Date.now()}`;
    await page.evaluate((prompt) => {
      const win = window as unknown as { __marker: string; __sawPlaceholder: boolean };
      win.__marker = 'still here';
      win.__sawPlaceholder = false;
      // The placeholder may be replaced within milliseconds, so watch for it rather than poll.
      new MutationObserver(() => {
        const placeholders = document.querySelectorAll('.card.pending .prompt');
        if ([...placeholders].some((p) => p.textContent === prompt)) win.__sawPlaceholder = true;
      }).observe(document.getElementById('grid')!, { childList: true, subtree: true });
    }, prompt);

    await page.getByLabel('Prompt').fill(prompt);
    await page.getByLabel('Size').selectOption('64');
    await page.getByRole('button', { name: 'Generate' }).click();
    await page.waitForFunction(resultShown, prompt, { timeout: 20_000 });

    expect(await page.evaluate(() => (window as unknown as { __marker?: string }).__marker)).toBe('still here');
    expect(await page.evaluate(() => (window as unknown as { __sawPlaceholder: boolean }).__sawPlaceholder)).toBe(true);
    // Newest first, exactly once, and the placeholder is gone.
    const prompts = await page.locator('.card .prompt').allTextContents();
    expect(prompts.filter((p) => p === prompt)).toHaveLength(1);
    expect(prompts.indexOf(prompt)).toBeLessThan(prompts.indexOf('seed card'));
    expect(await page.locator('.card.pending').count()).toBe(0);
    const card = page.locator('.card[data-digest]', { hasText: prompt });
    expect(await card.locator('img').evaluate((img: HTMLImageElement) => [img.naturalWidth, img.naturalHeight])).toEqual([64, 64]);
    // What the page shows is what the API has.
    const { artifacts } = await mesh!.client().request<{ artifacts: { jobId: string; digest: string; prompt: string }[] }>('GET', '/v1/artifacts?limit=1');
    expect(artifacts[0]!.prompt).toBe(prompt);
    expect(await card.getAttribute('data-job-id')).toBe(artifacts[0]!.jobId);
    expect(await card.getAttribute('data-digest')).toBe(artifacts[0]!.digest);
    expect(pageErrors).toEqual([]);
  });

  it("shows the server's message for a refused submission and keeps what was typed", async () => {
    // What the server says to the same request.
    const refused = await mesh!.client().submit({ type: 'image', input: { prompt: 'too many steps', width: 64, height: 64, steps: 99 } })
      .then(() => null, (error: unknown) => error);
    expect(refused).toBeInstanceOf(ApiError);
    const { status, message } = refused as ApiError;
    expect(status).toBe(400);

    const cardsBefore = await page.locator('.card').count();
    // The field's max=32 would stop the browser from submitting at all.
    await page.getByLabel('Steps').evaluate((input: HTMLInputElement) => input.removeAttribute('max'));
    await page.getByLabel('Prompt').fill('too many steps');
    await page.getByLabel('Steps').fill('99');
    await page.getByRole('button', { name: 'Generate' }).click();

    await expect.poll(() => page.locator('#form-error').textContent()).toBe(message);
    expect(await page.getByLabel('Prompt').inputValue()).toBe('too many steps');
    expect(await page.getByLabel('Steps').inputValue()).toBe('99');
    expect(await page.getByLabel('Size').inputValue()).toBe('64');
    expect(await page.locator('.card').count()).toBe(cardsBefore);
    expect(await page.evaluate(() => (window as unknown as { __marker?: string }).__marker)).toBe('still here');
    await page.screenshot({ path: SCREENSHOT, fullPage: true });
    expect(pageErrors).toEqual([]);
  });

  it('keeps the grant for this tab across a reload', async () => {
    await page.reload();
    await page.locator(cardOf(seedJob)).waitFor();
    expect(await page.locator('#grant-panel').isHidden()).toBe(true);
    expect(pageErrors).toEqual([]);
  });

  it('asks for a grant when it has none, and takes a pasted link', async () => {
    const refused = await mesh!.client('not-a-grant').request('GET', '/v1/artifacts').then(() => null, (error: unknown) => error);
    expect(refused).toBeInstanceOf(ApiError);

    const other = await browser!.newPage(); // a new tab: its own sessionStorage
    other.on('pageerror', (error) => pageErrors.push(error.message));
    await other.goto(`${mesh!.url}/`);
    await other.getByRole('heading', { name: 'This gallery needs a grant' }).waitFor();
    expect(await other.locator('#app').isHidden()).toBe(true);

    await other.getByRole('textbox', { name: 'Grant' }).fill('not-a-grant');
    await other.getByRole('button', { name: 'Open the gallery' }).click();
    await expect.poll(() => other.locator('#grant-error').textContent()).toBe((refused as ApiError).message);

    // Once more, and this time the bad grant's first request (for the read-only grant its URLs would carry) is
    // answered only after the good grant opened the gallery: a late 401 for a grant the page no longer uses must
    // not hide the gallery again (it once did, now and then, in CI).
    let goodGrantOpened!: () => void;
    const opened = new Promise<void>((resolve) => { goodGrantOpened = resolve; });
    await other.route('**/v1/grants:narrow', async (route) => {
      if (route.request().headers().authorization === 'Bearer not-a-grant') await opened;
      await route.continue();
    });
    await other.getByRole('textbox', { name: 'Grant' }).fill('not-a-grant');
    await other.getByRole('button', { name: 'Open the gallery' }).click();
    await other.getByRole('textbox', { name: 'Grant' }).fill(mesh!.galleryUrl);
    await other.getByRole('button', { name: 'Open the gallery' }).click();
    await other.locator(cardOf(seedJob)).waitFor();
    goodGrantOpened();
    await other.waitForResponse((response) => response.request().headers().authorization === 'Bearer not-a-grant' && response.status() === 401);
    await other.evaluate(() => new Promise((resolve) => setTimeout(resolve, 100))); // the page has read that answer
    expect(await other.locator(cardOf(seedJob)).isVisible()).toBe(true);
    expect(await other.locator('#grant-panel').isHidden()).toBe(true);
    await other.close();
    expect(pageErrors).toEqual([]);
  });

  /** A client grant minted by the admin, with these caveats (as `gpumesh grant create` would). */
  const mint = async (body: Record<string, unknown>): Promise<string> =>
    (await mesh!.client().request<{ token: string }>('POST', '/v1/grants', { kind: 'client', expires: '1h', ...body })).token;
  const jobOf = (id: string): Promise<JobView> => mesh!.client().request<JobView>('GET', `/v1/jobs/${id}`);
  const gridPrompts = (on: Page = page): Promise<string[]> => on.locator('#grid .card[data-digest] .prompt').allTextContents();

  it('shows cards as thumbnails made on the server (sharp, WebP), not the full files', async () => {
    await page.goto(mesh!.galleryUrl);
    const img = page.locator(`${cardOf(seedJob)} img`);
    await img.waitFor();
    const src = new URL((await img.getAttribute('src'))!, mesh!.url);
    expect(src.pathname).toMatch(/^\/v1\/blobs\/sha256:[0-9a-f]{64}\/thumbnail$/);
    expect(src.searchParams.get('width')).toBe('512');
    const response = await fetch(src);
    expect(response.status).toBe(200);
    expect(response.headers.get('content-type')).toBe('image/webp');
    expect(response.headers.get('x-content-type-options')).toBe('nosniff');
    // Made once and kept by digest: the second answer is the same bytes.
    const first = Buffer.from(await response.arrayBuffer());
    expect(Buffer.from(await (await fetch(src)).arrayBuffer())).toEqual(first);
    expect(first.subarray(8, 12).toString()).toBe('WEBP');
    expect(pageErrors).toEqual([]);
  });

  it('opens a detail view of a result: prompt, every parameter with the seed, model, host, attempts and route, timings, download; Esc closes it', async () => {
    const job = await jobOf(seedJob);
    const open = page.locator(`${cardOf(seedJob)} button.open`);
    // With the keyboard: the card is a button.
    await open.focus();
    await page.keyboard.press('Enter');
    const dialog = page.locator('dialog#detail');
    await expect.poll(() => dialog.evaluate((element: HTMLDialogElement) => element.open)).toBe(true);
    expect(await dialog.locator('.detail-prompt').textContent()).toBe('seed card');
    const fact = (term: string) => dialog.locator(`dd[data-fact="${term}"]`).first().textContent();
    expect(await fact('seed')).toBe(String(job.input.seed));
    expect(await fact('width')).toBe('64');
    expect(await fact('steps')).toBe('2');
    expect(await fact('model')).toBe(job.model);
    expect(await fact('host')).toBe(job.attempts.at(-1)!.host);
    expect(await fact('album')).toBe(job.album);
    expect(await fact('compute')).toMatch(/^\d+(\.\d+)? (ms|s)$/);
    expect(await fact('total')).toMatch(/^\d+(\.\d+)? (ms|s)$/);
    expect(await dialog.locator('.attempts li').first().textContent()).toContain(`#1 ${job.attempts[0]!.host} succeeded`);
    expect(await dialog.locator('.attempts li').first().textContent()).toMatch(/class \w+/);
    // The full picture, and a download of exactly the stored bytes.
    const full = dialog.locator('#detail-media img');
    await page.waitForFunction(() => (document.querySelector('#detail-media img') as HTMLImageElement | null)?.naturalWidth === 64);
    expect(new URL((await full.getAttribute('src'))!, mesh!.url).pathname).toBe(`/v1/blobs/${job.artifacts[0]!.digest}`);
    const download = await page.locator('#download').getAttribute('href');
    const bytes = Buffer.from(await (await fetch(new URL(download!, mesh!.url))).arrayBuffer());
    expect(`sha256:${createHash('sha256').update(bytes).digest('hex')}`).toBe(job.artifacts[0]!.digest);
    expect(await page.locator('#download').getAttribute('download')).toBe(`${seedJob}.png`);
    // Deleting is for grants that may: not the gallery link's.
    expect(await page.locator('#delete').isHidden()).toBe(true);
    await page.screenshot({ path: screenshotPath('gallery-detail') });
    await page.keyboard.press('Escape');
    await expect.poll(() => dialog.evaluate((element: HTMLDialogElement) => element.open)).toBe(false);
    // Focus goes back to the card it came from.
    expect(await page.evaluate(() => document.activeElement?.closest('.card')?.getAttribute('data-job-id'))).toBe(seedJob);
    expect(pageErrors).toEqual([]);
  });

  it('"again" and "variations" from the detail view: the same parameters, new seeds', async () => {
    const original = await jobOf(seedJob);
    const before = new Set((await mesh!.client().request<{ jobs: JobView[] }>('GET', '/v1/jobs?limit=200')).jobs.map((job) => job.id));
    await page.locator(`${cardOf(seedJob)} button.open`).click();
    await page.getByRole('button', { name: '4 variations' }).click();
    await expect.poll(() => page.locator('#detail-status').textContent()).toBe('4 variations queued (the same parameters, new seeds).');
    await page.getByRole('button', { name: 'Again' }).click();
    await expect.poll(() => page.locator('#detail-status').textContent()).toMatch(/^Queued again/);
    await page.keyboard.press('Escape');
    const made = await waitForJobs(before, 5);
    for (const job of made) {
      expect(job.type).toBe('image');
      expect(job.model).toBe(original.model);
      expect(job.album).toBe(original.album);
      expect({ ...job.input, seed: 0 }).toEqual({ ...original.input, seed: 0 });
    }
    const seeds = new Set([original.input.seed, ...made.map((job) => job.input.seed)]);
    expect(seeds.size).toBe(6);
    // They show in the grid as they finish, newest first, before the original.
    await expect.poll(async () => (await gridPrompts()).filter((prompt) => prompt === 'seed card').length, { timeout: 20_000 }).toBe(6);
    expect(pageErrors).toEqual([]);
  });

  /** The jobs made since `before` (ids), once there are `count` and all succeeded. */
  async function waitForJobs(before: Set<string>, count: number): Promise<JobView[]> {
    const { jobs } = await mesh!.client().request<{ jobs: JobView[] }>('GET', '/v1/jobs?limit=200');
    const made = jobs.filter((job) => !before.has(job.id));
    expect(made).toHaveLength(count);
    return Promise.all(made.map(async (job) => {
      expect((await mesh!.client().follow(job.id)).type).toBe('succeeded');
      return jobOf(job.id);
    }));
  }

  it('makes a clip from the form (frames, fps) and shows it as a playable card', async () => {
    await page.getByLabel('Make').selectOption('video');
    expect(await page.getByLabel('Frames').isVisible()).toBe(true);
    await page.getByLabel('Prompt').fill('a clip from the form');
    await page.getByLabel('Size').selectOption('64');
    await page.getByLabel('Steps').fill('1');
    await page.getByLabel('Frames').fill('4');
    await page.getByLabel('FPS').fill('4');
    await page.getByRole('button', { name: 'Make the clip' }).click();
    const card = page.locator('.card.video[data-digest]', { hasText: 'a clip from the form' });
    await card.waitFor({ timeout: 30_000 });
    const jobId = (await card.getAttribute('data-job-id'))!;
    const job = await jobOf(jobId);
    expect(job.type).toBe('video');
    expect(job.input).toMatchObject({ frames: 4, fps: 4, width: 64, height: 64, steps: 1 });
    await page.waitForFunction((id) => (document.querySelector(`.card[data-job-id="${id}"] video`) as HTMLVideoElement | null)?.readyState! >= 1, jobId, { timeout: 15_000 });
    // Its detail view plays the clip and says its frames and fps.
    await card.getByRole('button', { name: /^Details/ }).click();
    expect(await page.locator('dialog#detail dd[data-fact="frames"]').textContent()).toBe('4');
    expect(await page.locator('dialog#detail dd[data-fact="fps"]').textContent()).toBe('4');
    expect(await page.locator('#detail-media video').count()).toBe(1);
    await page.keyboard.press('Escape');
    await page.getByLabel('Make').selectOption('image');
    expect(pageErrors).toEqual([]);
  });

  it('searches by prompt, and the search finds results beyond the first page', async () => {
    await page.getByLabel('Search').fill('clip from the FORM');
    await expect.poll(() => gridPrompts()).toEqual(['a clip from the form']);
    await page.getByLabel('Search').fill('no such prompt anywhere');
    await expect.poll(() => page.locator('#empty').textContent()).toBe('No results whose prompt holds “no such prompt anywhere”.');
    expect(await page.locator('#empty').isVisible()).toBe(true);
    await page.getByLabel('Search').fill('');
    await expect.poll(async () => (await gridPrompts()).length).toBeGreaterThan(5);
    expect(pageErrors).toEqual([]);
  });

  it('loads older results as the grid scrolls (keyset pages), with the keyboard too', async () => {
    const body = { jobs: Array.from({ length: 50 }, (_, i) => ({ type: 'image', input: { prompt: `page filler ${i}`, width: 8, height: 8, steps: 1 } })) };
    const { results } = await mesh!.client().request<{ results: { id: string }[] }>('POST', '/v1/jobs:batch', body);
    await Promise.all(results.map((result) => mesh!.client().follow(result.id)));
    await page.reload();
    await page.locator('.card[data-digest]').first().waitFor();
    await expect.poll(() => page.locator('.card[data-digest]').count()).toBe(48);
    // Scrolled to the end: the next page comes by itself.
    await page.locator('#load-more').scrollIntoViewIfNeeded();
    await expect.poll(() => page.locator('.card[data-digest]').count()).toBeGreaterThan(48);
    expect(await gridPrompts()).toContain('seed card');
    // The detail view walks the grid with the arrow keys.
    await page.locator('.card[data-digest] button.open').first().click();
    const first = await page.locator('.detail-prompt').textContent();
    await page.keyboard.press('ArrowRight');
    await expect.poll(() => page.locator('.detail-prompt').textContent()).not.toBe(first);
    await page.keyboard.press('ArrowLeft');
    await expect.poll(() => page.locator('.detail-prompt').textContent()).toBe(first);
    await page.keyboard.press('Escape');
    expect(pageErrors).toEqual([]);
  });

  it('switches albums for a grant with several, submits into the album shown, and deletes for a grant that may', async () => {
    const grant = await mint({ actions: ['jobs:submit', 'jobs:read', 'artifacts:read', 'blobs:read', 'artifacts:delete'], types: ['image', 'video'], albums: ['cats', 'dogs'] });
    const client = mesh!.client(grant);
    for (const album of ['cats', 'dogs']) {
      const { id } = await client.submit({ type: 'image', album, input: { prompt: `a picture for ${album}`, width: 64, height: 64, steps: 1 } });
      expect((await client.follow(id)).type).toBe('succeeded');
    }
    const other = await browser!.newPage({ viewport: { width: 1100, height: 800 } });
    other.on('pageerror', (error) => pageErrors.push(error.message));
    await other.goto(`${mesh!.url}/#grant=${encodeURIComponent(grant)}`);
    await expect.poll(() => gridPrompts(other)).toEqual(['a picture for dogs', 'a picture for cats']);
    const albums = other.getByLabel('Album');
    expect(await albums.isVisible()).toBe(true);
    expect(await albums.locator('option').allTextContents()).toEqual(['All albums', 'cats', 'dogs']);
    await albums.selectOption('cats');
    await expect.poll(() => gridPrompts(other)).toEqual(['a picture for cats']);
    // A new picture goes to the album shown.
    await other.getByLabel('Prompt').fill('another cat');
    await other.getByLabel('Size').selectOption('64');
    await other.getByRole('button', { name: 'Generate' }).click();
    await expect.poll(() => gridPrompts(other), { timeout: 20_000 }).toEqual(['another cat', 'a picture for cats']);
    const catId = (await other.locator('.card[data-digest]').first().getAttribute('data-job-id'))!;
    expect((await jobOf(catId)).album).toBe('cats');
    await other.screenshot({ path: screenshotPath('gallery-album-cats') });

    // Delete, asked twice.
    await other.locator('.card[data-digest] button.open').first().click();
    const remove = other.locator('#delete');
    await other.locator('.detail-prompt', { hasText: 'another cat' }).waitFor();
    await remove.waitFor(); // shown: this grant may delete
    await remove.click();
    expect(await remove.textContent()).toBe('Delete for good?');
    await remove.click();
    await expect.poll(() => gridPrompts(other)).toEqual(['a picture for cats']);
    expect(await other.locator('dialog#detail').evaluate((element: HTMLDialogElement) => element.open)).toBe(false);
    const listed = await client.request<{ artifacts: { jobId: string }[] }>('GET', '/v1/artifacts?limit=200');
    expect(listed.artifacts.map((artifact) => artifact.jobId)).not.toContain(catId);
    expect((await jobOf(catId)).artifacts).toEqual([]);
    // The gallery link's grant may not delete: 403, and nothing is gone.
    const galleryGrant = decodeURIComponent(new URL(mesh!.galleryUrl).hash.slice('#grant='.length));
    const refused = await fetch(`${mesh!.url}/v1/jobs/${seedJob}/artifacts`, { method: 'DELETE', headers: { authorization: `Bearer ${galleryGrant}` } });
    expect(refused.status).toBe(403);
    expect((await jobOf(seedJob)).artifacts).toHaveLength(1);
    await other.close();
    expect(pageErrors).toEqual([]);
  });

  it('works on a phone-sized screen: no sideways scrolling, the detail view fits', async () => {
    const phone = await browser!.newPage({ viewport: { width: 390, height: 844 }, isMobile: true, hasTouch: true });
    phone.on('pageerror', (error) => pageErrors.push(error.message));
    await phone.goto(mesh!.galleryUrl);
    const first = phone.locator('.card[data-digest]').first();
    await first.waitFor();
    expect(await phone.evaluate(() => document.documentElement.scrollWidth)).toBeLessThanOrEqual(390);
    await phone.screenshot({ path: screenshotPath('gallery-phone') });
    await first.locator('button.open').tap();
    await phone.locator('.detail-prompt').waitFor();
    const box = await phone.locator('dialog#detail').boundingBox();
    expect(box!.x).toBeGreaterThanOrEqual(0);
    expect(box!.x + box!.width).toBeLessThanOrEqual(390);
    await phone.screenshot({ path: screenshotPath('gallery-phone-detail') });
    await phone.close();
    expect(pageErrors).toEqual([]);
  });
  it('"Tell me when it is done": the browser is asked once, and the job\'s end is a notification from the page', async () => {
    // Headless Chromium shows none: the page's Notification is recorded instead, with the permission the person gave.
    const tab = await browser!.newPage({ viewport: { width: 1100, height: 800 } });
    await tab.addInitScript(() => {
      const shown: { title: string; body: string }[] = [];
      (window as unknown as { shownNotifications: typeof shown }).shownNotifications = shown;
      class RecordedNotification extends EventTarget {
        static permission = 'default';
        static async requestPermission(): Promise<string> { RecordedNotification.permission = 'granted'; return 'granted'; }
        constructor(title: string, options: { body?: string } = {}) { super(); shown.push({ title, body: options.body ?? '' }); }
      }
      (window as unknown as { Notification: unknown }).Notification = RecordedNotification;
    });
    try {
      await tab.goto(mesh!.galleryUrl);
      await tab.getByLabel('Tell me when it is done').check();
      await tab.getByLabel('Prompt').fill('tell me when this is done');
      await tab.getByLabel('Size').selectOption('64');
      await tab.getByRole('button', { name: 'Generate' }).click();
      await tab.waitForFunction(() => (window as unknown as { shownNotifications: unknown[] }).shownNotifications.length > 0, undefined, { timeout: 30_000 });
      expect(await tab.evaluate(() => (window as unknown as { shownNotifications: unknown[] }).shownNotifications)).toEqual([{ title: 'Your job is ready', body: 'tell me when this is done' }]);
    } finally {
      await tab.close();
    }
  });

  it('"Make a clip from this" in a picture\'s detail view: a clip job that takes the picture by reference, made and shown', async () => {
    await page.locator(`${cardOf(seedJob)} button.open`).click();
    await page.getByRole('button', { name: 'Make a clip from this' }).click();
    await expect.poll(() => page.locator('#detail-status').textContent()).toBe('A clip from this picture is queued: it appears first in the grid.');
    await page.keyboard.press('Escape');
    const clips = async () => (await mesh!.client().request<{ jobs: JobView[] }>('GET', '/v1/jobs?limit=200')).jobs
      .filter((job) => job.type === 'video' && job.input.prompt === 'seed card');
    const [clip] = await waitFor(async () => ((await clips()).length > 0 ? clips() : null), { timeoutMs: 10_000, what: 'the clip job' });
    expect((await mesh!.client().follow(clip!.id)).type).toBe('succeeded');
    const made = await jobOf(clip!.id);
    // The picture went in by digest: the seed job's output.
    const picture = await jobOf(seedJob);
    expect(made.input.image).toBe(picture.artifacts[0]!.digest);
    await page.locator(`.card.video[data-job-id="${clip!.id}"]`).waitFor({ timeout: 30_000 });
    // Not offered for a clip.
    await page.locator(`.card.video[data-job-id="${clip!.id}"]`).getByRole('button', { name: /^Details/ }).click();
    expect(await page.getByRole('button', { name: 'Make a clip from this' }).isHidden()).toBe(true);
    await page.keyboard.press('Escape');
    expect(pageErrors).toEqual([]);
  });
});
