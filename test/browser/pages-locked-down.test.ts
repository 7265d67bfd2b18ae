import http from 'node:http';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import type { Browser, BrowserContext, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CHROMIUM, hasChromium, launchChromium, screenshotPath } from '../helpers/chromium.js';
import type { HostView } from '../../src/protocol/api/index.js';
import { dataKeptOnFailure, startMesh, waitFor, type RunningMesh } from '../helpers/mesh.js';
import { gpumesh } from '../helpers/processes.js';

/**
 * Issue 29, finding 8: the pages held to the seed's ruler for web surfaces, against a real `gpumesh up` (its local
 * agent and the built-in generator, so the gallery has a finished picture and the mesh view a host) in a real headless
 * Chromium. Every way a page or its files can be reached carries the same security headers (`/web/index.html` once
 * carried none); axe-core finds no serious or critical WCAG 2.1 A/AA violation on the gallery, its detail view and
 * the mesh view, in light and in dark; each page has one `main` and one `h1`, follows the colour scheme and reduced
 * motion, and asks nothing of another origin.
 */
const AXE = createRequire(import.meta.url).resolve('axe-core/axe.min.js');
const WCAG_TAGS = ['wcag2a', 'wcag2aa', 'wcag21a', 'wcag21aa'];

/** A page's address and its files: each must carry the headers whichever way it is asked for. */
const SURFACES = [
  '/', '/mesh', '/web/index.html', '/web/mesh.html', '/web/gallery.js', '/web/mesh.js', '/web/gallery.css', '/web/mesh.css',
  '/web/vendor/uplot/uPlot.esm.js', '/web/vendor/uplot/uPlot.min.css',
];

/** A conditional GET of `url` with `etag`: its status and headers. */
function revalidate(url: string, etag: string): Promise<{ status: number; headers: Headers }> {
  return new Promise((resolve, reject) => {
    http.get(url, { headers: { 'if-none-match': etag } }, (response) => {
      response.resume();
      const headers = new Headers();
      for (const [name, value] of Object.entries(response.headers)) if (typeof value === 'string') headers.set(name, value);
      response.on('end', () => resolve({ status: response.statusCode!, headers }));
    }).on('error', reject);
  });
}

interface AxeViolation { id: string; impact: string | null; help: string; nodes: { target: string[]; failureSummary?: string }[] }

describe('the pages, locked down and accessible', () => {
  it('has a Chromium to drive (npm run setup-tests installs Debian\'s)', () => {
    expect(hasChromium(), `no Chromium at ${CHROMIUM}`).toBe(true);
  });

  let mesh: RunningMesh | undefined;
  let browser: Browser | undefined;
  let meshUrl: string;
  let jobId: string;
  const data = dataKeptOnFailure();

  beforeAll(async () => {
    [mesh, browser] = await Promise.all([startMesh(), launchChromium()]);
    meshUrl = await waitFor(() => /^\s+mesh\s+(\S+)$/m.exec(mesh!.output())?.[1], { what: 'gpumesh up to print the mesh link' });
    // Real content: a finished picture (the gallery's card, its detail) and a host with a device (the mesh view).
    const client = mesh.client();
    jobId = (await client.submit({ type: 'image', input: { prompt: 'a lighthouse at dusk', width: 64, height: 64, steps: 2 } })).id;
    expect((await client.follow(jobId)).type).toBe('succeeded');
    // And a host in the states a person must read at a glance: one that cannot serve video (a warning line), then
    // lost (a real agent process SIGKILLed): the mesh view's warning and danger colours, on its greyed card.
    const grant = (await client.request<{ token: string }>('POST', '/v1/grants', { kind: 'agent', host: 'second', classes: ['image', 'video'] })).token;
    const second = gpumesh(['agent', '--url', mesh.url, '--host', 'second', '--classes', 'image,video', '--data', join(mesh.data, 'agent-second'), '--cpu-budget', '512'],
      { GPUMESH_GRANT: grant, GPUMESH_FFMPEG: 'none' });
    const hostsNow = async (): Promise<HostView[]> => (await client.request<{ hosts: HostView[] }>('GET', '/v1/hosts')).hosts;
    await waitFor(async () => (await hostsNow()).some((host) => host.id === 'second' && host.connected), { timeoutMs: 30_000, what: 'the second agent to join' });
    await second.kill('SIGKILL');
    await waitFor(async () => (await hostsNow()).some((host) => host.id === 'second' && !host.connected), { what: 'the second host to be lost' });
    data.ready();
  });

  afterAll(async () => {
    await browser?.close();
    await mesh?.stop();
    data.cleanUp(mesh);
  });

  it('every page and file, by every path (HEAD and 304 too), carries the strict CSP, no framing, nosniff and no Referer', async () => {
    const expectLockedDown = (headers: Headers, what: string): void => {
      const csp = headers.get('content-security-policy') ?? '';
      expect(csp, what).toContain("default-src 'self'");
      expect(csp, what).toContain("script-src 'self'");
      expect(csp, what).toContain("frame-ancestors 'none'");
      expect(csp, what).not.toContain('unsafe-inline');
      expect(headers.get('x-content-type-options'), what).toBe('nosniff');
      expect(headers.get('referrer-policy'), what).toBe('no-referrer');
    };
    let revalidated = 0;
    for (const path of SURFACES) {
      const answer = await fetch(`${mesh!.url}${path}`);
      expect(answer.status, path).toBe(200);
      await answer.arrayBuffer();
      expectLockedDown(answer.headers, `GET ${path}`);
      const head = await fetch(`${mesh!.url}${path}`, { method: 'HEAD' });
      expectLockedDown(head.headers, `HEAD ${path}`);
      const etag = answer.headers.get('etag');
      if (etag) {
        // Over node:http: fetch adds Cache-Control: no-cache to a conditional request, which no server answers 304.
        const unchanged = await revalidate(`${mesh!.url}${path}`, etag);
        expect(unchanged.status, `${path} revalidated`).toBe(304);
        expectLockedDown(unchanged.headers, `304 ${path}`);
        revalidated++;
      }
    }
    expect(revalidated, 'some files were answered 304').toBeGreaterThan(0);
  });

  /**
   * A page in a fresh context of `scheme`, every request it makes (and every socket it opens) recorded. `axe`: the
   * context sets the page's CSP aside, for axe-core goes in as an inline script (`addScriptTag`), which the CSP rightly
   * refuses; a request to another origin is then recorded even where the CSP would have stopped it. Without it the CSP
   * holds, and any refusal of it is an error.
   */
  async function open(scheme: 'light' | 'dark', url: string, ready: (page: Page) => Promise<void>, { axe = false } = {}): Promise<{ page: Page; context: BrowserContext; requests: string[]; errors: string[] }> {
    const context = await browser!.newContext({ colorScheme: scheme, viewport: { width: 1200, height: 900 }, bypassCSP: axe });
    const page = await context.newPage();
    const requests: string[] = [];
    const errors: string[] = [];
    page.on('request', (request) => requests.push(request.url()));
    page.on('websocket', (socket) => requests.push(socket.url()));
    page.on('pageerror', (error) => errors.push(error.message));
    page.on('console', (message) => { if (message.type() === 'error' && /Content Security Policy/.test(message.text())) errors.push(message.text()); });
    await page.goto(url);
    await ready(page);
    return { page, context, requests, errors };
  }

  /** axe-core's WCAG 2.1 A and AA rules on the page as it is now: the violations that are serious or critical. */
  async function seriousViolations(page: Page): Promise<AxeViolation[]> {
    await page.addScriptTag({ path: AXE });
    const result = await page.evaluate(async (tags) => {
      const axe = (window as unknown as { axe: { run(context: Document, options: unknown): Promise<{ violations: AxeViolation[]; passes: unknown[] }> } }).axe;
      return axe.run(document, { runOnly: { type: 'tag', values: tags }, resultTypes: ['violations'] });
    }, WCAG_TAGS);
    expect(result.passes.length + result.violations.length, 'axe ran its rules').toBeGreaterThan(0);
    return result.violations.filter((violation) => violation.impact === 'serious' || violation.impact === 'critical');
  }

  const describeViolations = (violations: AxeViolation[]): string =>
    violations.map((violation) => `${violation.id} (${violation.impact}): ${violation.help}\n${violation.nodes.map((node) => `  ${node.target.join(' ')}: ${node.failureSummary ?? ''}`).join('\n')}`).join('\n');

  /** What every page must be, whatever it shows. */
  async function expectRuler(page: Page, requests: readonly string[], errors: readonly string[], view: string): Promise<void> {
    expect(await page.locator('main').count(), `${view}: one main landmark`).toBe(1);
    expect(await page.locator('h1').count(), `${view}: one h1`).toBe(1);
    const origins = new Set(requests.filter((url) => !url.startsWith('data:') && !url.startsWith('blob:')).map((url) => new URL(url).origin.replace(/^ws/, 'http')));
    expect([...origins], `${view}: asks only its own origin`).toEqual([mesh!.url]);
    expect(errors, `${view}: no page errors or CSP refusals`).toEqual([]);
    const violations = await seriousViolations(page);
    expect(violations, `${view}: axe found\n${describeViolations(violations)}`).toEqual([]);
  }

  const galleryReady = async (page: Page): Promise<void> => {
    await page.waitForFunction((id) => (document.querySelector(`.card[data-job-id="${id}"] img`) as HTMLImageElement | null)?.naturalWidth, jobId);
    await expect.poll(() => page.locator('#connection').textContent()).toBe('Live');
  };
  const meshReady = async (page: Page): Promise<void> => {
    await page.locator('.host .device .bar').first().waitFor();
    await page.locator('.host[data-host="second"][data-state="lost"] .unavailable').waitFor();
    await expect.poll(() => page.locator('#connection').textContent()).toBe('Live');
    await page.locator('#plots canvas').first().waitFor();
  };

  for (const scheme of ['light', 'dark'] as const) {
    it(`the gallery and its detail view (${scheme}): no serious or critical WCAG 2.1 A/AA violation, one main, one h1, nothing from elsewhere`, async () => {
      const { page, context, requests, errors } = await open(scheme, mesh!.galleryUrl, galleryReady, { axe: true });
      try {
        await expectRuler(page, requests, errors, `gallery (${scheme})`);
        await page.locator(`.card[data-job-id="${jobId}"] button.open`).click();
        await expect.poll(() => page.locator('dialog#detail').evaluate((dialog: HTMLDialogElement) => dialog.open)).toBe(true);
        await page.waitForFunction(() => (document.querySelector('#detail-media img') as HTMLImageElement | null)?.naturalWidth);
        await page.screenshot({ path: screenshotPath(`gallery-detail-${scheme}`) });
        await expectRuler(page, requests, errors, `gallery detail (${scheme})`);
      } finally {
        await context.close();
      }
    });

    it(`the mesh view with a host, its device and plots (${scheme}): no serious or critical WCAG 2.1 A/AA violation, one main, one h1, nothing from elsewhere`, async () => {
      const { page, context, requests, errors } = await open(scheme, meshUrl, meshReady, { axe: true });
      try {
        await page.screenshot({ path: screenshotPath(`mesh-view-${scheme}`), fullPage: true });
        await expectRuler(page, requests, errors, `mesh view (${scheme})`);
      } finally {
        await context.close();
      }
    });
  }

  it('each page follows prefers-color-scheme (dark is dark) and prefers-reduced-motion (no animation, no transition)', async () => {
    for (const [url, ready] of [[mesh!.galleryUrl, galleryReady], [meshUrl, meshReady]] as const) {
      const background: Record<string, number> = {};
      for (const scheme of ['light', 'dark'] as const) {
        const { page, context, requests, errors } = await open(scheme, url, ready);
        expect(errors, `${url} (${scheme}): no page errors or CSP refusals`).toEqual([]);
        expect(requests.every((request) => request.startsWith('data:') || new URL(request).origin.replace(/^ws/, 'http') === mesh!.url), `${url}: its own origin only`).toBe(true);
        // The page's own background, as a luminance 0–255.
        background[scheme] = await page.evaluate(() => {
          const [r, g, b] = getComputedStyle(document.body).backgroundColor.match(/\d+(\.\d+)?/g)!.map(Number);
          return 0.2126 * r! + 0.7152 * g! + 0.0722 * b!;
        });
        await context.close();
      }
      expect(background.light, `${url}: light is light`).toBeGreaterThan(200);
      expect(background.dark, `${url}: dark is dark`).toBeLessThan(50);

      const context = await browser!.newContext({ reducedMotion: 'reduce' });
      const page = await context.newPage();
      await page.goto(url);
      await ready(page);
      // Nothing on the page moves: every element's animations and transitions are off.
      const moving = await page.evaluate(() => [...document.querySelectorAll('*')].filter((element) => {
        const style = getComputedStyle(element);
        return style.animationName !== 'none' || style.transitionDuration.split(',').some((duration) => parseFloat(duration) > 0);
      }).map((element) => element.tagName + (element.className ? `.${String(element.className)}` : '')));
      expect(moving, `${url}: moves with reduced motion`).toEqual([]);
      await context.close();
    }
  });
});
