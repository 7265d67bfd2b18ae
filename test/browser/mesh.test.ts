import { join } from 'node:path';
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { inspectGrant } from '../../src/protocol/grant-token.js';
import type { HostView } from '../../src/protocol/api/index.js';
import { CHROMIUM, hasChromium, launchChromium, screenshotPath } from '../helpers/chromium.js';
import { dataKeptOnFailure, startMesh, waitFor, type RunningMesh } from '../helpers/mesh.js';
import { gpumesh, gpumeshRun, type Proc } from '../helpers/processes.js';
import { ScriptedAgent } from '../helpers/scripted-agent.js';

/**
 * The mesh view (/mesh) in a real headless Chromium against a real mesh: `gpumesh up` (the orchestrator, its local
 * agent `vm`-or-whatever-this-machine-is-called and the built-in generator) plus a second real agent process,
 * `second`. The link the page opens is the `mesh` line `up` prints. A host dropping is that second agent SIGKILLed.
 * A breaker opening needs a host whose engine fails: a scripted agent over a real WebSocket (test/helpers/scripted-agent.ts)
 * stands in for a GPU host with a failing engine, since no engine here fails on purpose.
 */
/** Kept under test-artifacts/: the states a person should recognise at a glance. */
const SCREENSHOT = screenshotPath('mesh-view-breaker-open');

const hostCard = (host: string): string => `.host[data-host="${host}"]`;

describe('the mesh view in a browser', () => {
  it('has a Chromium to drive (npm run setup-tests installs Debian\'s)', () => {
    expect(hasChromium(), `no Chromium at ${CHROMIUM}`).toBe(true);
  });

  let mesh: RunningMesh | undefined;
  let browser: Browser | undefined;
  let second: Proc | undefined;
  let flappy: ScriptedAgent | undefined;
  let page: Page;
  let meshUrl: string;
  let localHost: string;
  const pageErrors: string[] = [];
  const data = dataKeptOnFailure();

  const hostsNow = async (): Promise<HostView[]> => (await mesh!.client().request<{ hosts: HostView[] }>('GET', '/v1/hosts')).hosts;
  const agentGrant = async (host: string, classes = ['image']): Promise<string> =>
    (await mesh!.client().request<{ token: string }>('POST', '/v1/grants', { kind: 'agent', host, classes })).token;

  beforeAll(async () => {
    [mesh, browser] = await Promise.all([
      startMesh({
        config: {
          // The breaker opens after two failures in a row and stays open 3 s, then a probe is its trial.
          breakers: { replica: { failuresToOpen: 2, failureRatio: 0.5, window: 6, minCalls: 4, openForS: 3, maxOpenForS: 6, successesToClose: 1 } },
          health: { probeIntervalMs: 0 },
          retry: { backoffMs: 20 },
          models: { gen: { retries: 6 } },
        },
      }),
      launchChromium(),
    ]);
    meshUrl = await waitFor(() => /^\s+mesh\s+(\S+)$/m.exec(mesh!.output())?.[1], { what: 'gpumesh up to print the mesh link' });
    localHost = (await hostsNow())[0]!.id;
    // A host meant to serve clips that cannot (ffmpeg turned off): the view must say why.
    second = gpumesh(['agent', '--url', mesh.url, '--host', 'second', '--classes', 'image,video', '--data', join(mesh.data, 'agent-second'), '--cpu-budget', '512'],
      { GPUMESH_GRANT: await agentGrant('second', ['image', 'video']), GPUMESH_FFMPEG: 'none' });
    await waitFor(async () => (await hostsNow()).some((host) => host.id === 'second' && host.connected), { timeoutMs: 30_000, what: 'the second agent to join' });
    page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
    page.on('pageerror', (error) => pageErrors.push(error.message));
    // The page's CSP refuses inline scripts and styles: a refusal is a bug in the page.
    page.on('console', (message) => { if (message.type() === 'error' && /Content Security Policy/.test(message.text())) pageErrors.push(message.text()); });
    data.ready();
  });

  afterAll(async () => {
    await flappy?.close();
    await second?.kill('SIGKILL');
    await browser?.close();
    await mesh?.stop();
    data.cleanUp(mesh);
  });

  it('opens from the `mesh` link `up` prints, whose grant reads the mesh and jobs and nothing else', async () => {
    const grant = new URL(meshUrl).hash.slice('#grant='.length);
    expect(inspectGrant(grant).caveats).toEqual(['kind client', 'actions jobs:read,mesh:read', expect.stringMatching(/^time-before /)]);
    // It cannot submit, cancel or see pictures.
    const submit = await fetch(`${mesh!.url}/v1/jobs`, {
      method: 'POST', headers: { authorization: `Bearer ${grant}`, 'content-type': 'application/json' },
      body: JSON.stringify({ type: 'image', input: { prompt: 'not allowed', width: 8, height: 8 } }),
    });
    expect(submit.status).toBe(403);
    expect((await fetch(`${mesh!.url}/v1/artifacts`, { headers: { authorization: `Bearer ${grant}` } })).status).toBe(403);

    await page.goto(meshUrl);
    await page.locator(hostCard('second')).waitFor();
    await expect.poll(() => page.locator('#connection').textContent()).toBe('Live');
    expect(page.url()).toBe(`${mesh!.url}/mesh`); // the grant left the address bar
  });

  it('shows the hosts, their devices with memory bars, resident models and the queues, as the API has them', async () => {
    const hosts = await hostsNow();
    expect(hosts.map((host) => host.id).sort()).toEqual([localHost, 'second'].sort());
    for (const host of hosts) {
      const card = page.locator(hostCard(host.id));
      await expect.poll(() => card.getAttribute('data-state')).toBe('healthy');
      expect(await card.locator('.chip').allTextContents()).toEqual(host.classes);
      expect(await card.locator('.link-breaker .breaker').getAttribute('data-state')).toBe('closed');
      expect(await card.locator('.link-breaker').textContent()).toBe('link ok');
      // How it governs its engine processes, as the API says (linux · cgroup v2 here, or process groups without cgroups).
      expect(host.platform).toBe('linux');
      expect(await card.locator('.host-meta .platform').textContent()).toBe(`linux · ${host.governance}`);
      for (const device of host.devices) {
        const bar = card.locator(`.device[data-device="${device.id}"] .bar[role="meter"]`);
        expect(await bar.getAttribute('aria-valuemax')).toBe(String(Math.round(device.budgetMB)));
        expect(Number(await bar.getAttribute('aria-valuenow'))).toBeGreaterThanOrEqual(0);
        expect(await card.locator(`.device[data-device="${device.id}"] .memory`).textContent()).toMatch(/^[\d,.]+ MB \/ [\d,.]+ MB$/);
      }
    }
    // The second host cannot serve video, and its card says why, as the API does.
    const unavailable = (hosts.find((host) => host.id === 'second') as HostView & { unavailable?: Record<string, string> }).unavailable;
    expect(unavailable?.video).toMatch(/ffmpeg/);
    expect(await page.locator(`${hostCard('second')} .unavailable li[data-type="video"]`).textContent()).toBe(`video: off — ${unavailable!.video}`);
    await page.screenshot({ path: screenshotPath('mesh-view-host-without-video-real'), fullPage: true });
    // The second agent's budget is the --cpu-budget it was started with.
    expect(await page.locator(`${hostCard('second')} .device .bar`).first().getAttribute('aria-valuemax')).toBe('512');
    const status = await mesh!.client().request<{ queues: Record<string, { depth: number; limit: number }> }>('GET', '/v1/status');
    for (const [model, queue] of Object.entries(status.queues)) {
      expect(await page.locator(`.queue[data-model="${model}"] .depth`).textContent()).toBe(`${queue.depth} / ${queue.limit.toLocaleString('en-US')}`);
    }
    expect(await page.locator('[data-tile="hosts"] .value').textContent()).toBe('2 / 2');
    expect(pageErrors).toEqual([]);
  });

  it('updates live when a job runs: in flight on its host, its model resident there, the counts', async () => {
    const succeededBefore = Number(await page.locator('[data-tile="succeeded"] .value').textContent());
    await page.evaluate(() => {
      const win = window as unknown as { __marker: string; __inFlight: string[]; __chips: string[] };
      win.__marker = 'no reload';
      win.__inFlight = [];
      win.__chips = [];
      // A job is in flight for a moment only; watch for it rather than poll.
      new MutationObserver(() => {
        for (const chip of document.querySelectorAll<HTMLElement>('.jobs li[data-job-id]')) {
          const host = chip.closest<HTMLElement>('.host')!.dataset.host!;
          win.__inFlight.push(`${chip.dataset.jobId}@${host}`);
          win.__chips.push(chip.textContent!);
        }
      }).observe(document.getElementById('hosts')!, { childList: true, subtree: true });
    });
    // The page shows a job in flight from its events at once, however briefly it runs.
    const { id } = await mesh!.client().submit({ type: 'image', input: { prompt: 'the mesh view watches this', width: 64, height: 64, steps: 2 } });
    expect((await mesh!.client().follow(id)).type).toBe('succeeded');
    const job = await mesh!.client().job(id);
    const ranOn = job.attempts.at(-1)!.host;

    await expect.poll(() => page.locator('[data-tile="succeeded"] .value').textContent()).toBe(String(succeededBefore + 1));
    const card = page.locator(hostCard(ranOn));
    await card.locator('.resident li[data-model="gen"]').waitFor();
    await expect.poll(() => card.locator('.replica[data-model="gen"]').getAttribute('data-resident')).toBe('yes');
    await expect.poll(() => card.locator('.load').getAttribute('data-jobs-in-flight')).toBe('0');
    const inFlight = await page.evaluate(() => (window as unknown as { __inFlight: string[] }).__inFlight);
    expect(inFlight).toContain(`${id}@${ranOn}`);
    // Its chip tells it apart from its neighbours (ids share their time prefix: the chip shows the random tail) and
    // says what it is.
    const chips = await page.evaluate(() => (window as unknown as { __chips: string[] }).__chips);
    expect(chips).toContain(`…${id.slice(-6)} image · gen “the mesh view watches this”`);
    // The memory bar of the device holding it shows the model's memory, as the API says once the host's next
    // heartbeat has brought it (the page reloads once more a heartbeat after a load).
    const used = await waitFor(async () => {
      const host = (await hostsNow()).find((entry) => entry.id === ranOn)!;
      const resident = host.resident.find((entry) => entry.model === 'gen')!;
      const device = host.devices.find((entry) => entry.id === resident.device)!;
      return device.usedMB > 0 ? { device: device.id, usedMB: device.usedMB } : null;
    }, { timeoutMs: 10_000, what: `${ranOn} to report the memory gen takes` });
    await expect.poll(async () => Number(await card.locator(`.device[data-device="${used.device}"] .bar`).getAttribute('aria-valuenow')), { timeout: 20_000 })
      .toBe(Math.round(used.usedMB));
    await page.locator(`.activity li[data-type="replica:loaded"][data-host="${ranOn}"]`).waitFor();
    expect(await page.evaluate(() => (window as unknown as { __marker?: string }).__marker)).toBe('no reload');
    expect(pageErrors).toEqual([]);
  });

  it('counts the jobs waiting for another job\'s output beside the queued ones, as `gpumesh status` lists them', async () => {
    await expect.poll(() => page.locator('[data-tile="waiting"] .value').textContent()).toBe('0');
    const client = mesh!.client();
    const pipeline = await client.request<{ id: string; steps: { jobId: string }[] }>('POST', '/v1/pipelines', {
      steps: [
        { id: 'slow', type: 'image', input: { prompt: 'a long one', width: 1024, height: 1024, steps: 32 } },
        { id: 'after', type: 'image', input: { prompt: 'from the long one', image: { fromStep: 'slow' } } },
      ],
    });
    await expect.poll(() => page.locator('[data-tile="waiting"] .value').textContent()).toBe('1');
    expect(await page.locator('[data-tile="waiting"] .label').textContent()).toBe('jobs waiting for another job');
    const status = await gpumeshRun(['status'], { GPUMESH_HOME: mesh!.data, GPUMESH_URL: mesh!.url });
    expect(status.code, status.output).toBe(0);
    expect(status.stdout).toMatch(/^jobs: waiting 1, /m);
    await client.request('DELETE', `/v1/pipelines/${pipeline.id}`);
    await expect.poll(() => page.locator('[data-tile="waiting"] .value').textContent()).toBe('0');
    expect(pageErrors).toEqual([]);
  });

  it('folds a burst of job events into a few reloads (no request per event)', async () => {
    // The page's own record of its requests (Resource Timing), so the test's event loop adds no jitter.
    await page.evaluate(() => {
      performance.setResourceTimingBufferSize(10_000);
      performance.clearResourceTimings();
    });
    const started = await page.evaluate(() => performance.now());
    const body = { jobs: Array.from({ length: 60 }, (_, i) => ({ type: 'image', input: { prompt: `burst ${i}`, width: 8, height: 8, steps: 1 } })) };
    const { results } = await mesh!.client().request<{ results: { status: number; id: string }[] }>('POST', '/v1/jobs:batch', body);
    expect(results.map((result) => result.status)).toEqual(results.map(() => 202));
    const ends = await Promise.all(results.map((result) => mesh!.client().follow(result.id)));
    expect(ends.every((end) => end.type === 'succeeded')).toBe(true);
    // The page catches up with the last of them…
    await expect.poll(() => page.locator('[data-tile="queued"] .value').textContent()).toBe('0');
    await expect.poll(() => page.locator('[data-tile="in-flight"] .value').textContent()).toBe('0');
    const { reloads, now } = await page.evaluate(() => ({
      reloads: performance.getEntriesByType('resource').filter((entry) => new URL(entry.name).pathname === '/v1/hosts').map((entry) => entry.startTime),
      now: performance.now(),
    }));
    // …with reloads at least 500 ms apart, for 180 and more job events (queued, dispatched, succeeded of each job).
    expect(reloads.length).toBeGreaterThan(0);
    expect(reloads.length).toBeLessThanOrEqual(Math.ceil((now - started) / 500) + 1);
    for (let k = 1; k < reloads.length; k++) expect(reloads[k]! - reloads[k - 1]!).toBeGreaterThanOrEqual(450); // 500 ms, less the jitter between calling fetch and its timing entry
    expect(pageErrors).toEqual([]);
  });

  it('shows a host dropping: the second agent, SIGKILLed, turns lost with the reason, and the counts follow', async () => {
    await second!.kill('SIGKILL');
    const card = page.locator(hostCard('second'));
    await expect.poll(() => card.getAttribute('data-state'), { timeout: 15_000 }).toBe('lost');
    await expect.poll(() => card.locator('.load').textContent()).toMatch(/^link dropped · lost \d+ s ago$/);
    const item = page.locator('.activity li[data-type="host:lost"][data-host="second"]');
    await item.waitFor();
    expect(await item.textContent()).toContain('second lost: link dropped');
    expect(await page.locator('[data-tile="hosts"] .value').textContent()).toBe('1 / 2');
    // What the API says, too.
    expect((await hostsNow()).find((host) => host.id === 'second')).toMatchObject({ connected: false, health: 'disconnected' });
    expect(pageErrors).toEqual([]);
  });

  it('shows a breaker opening (a scripted host whose every batch fails stands in for a failing engine), then its trial closing it', async () => {
    flappy = new ScriptedAgent({ url: mesh!.url, grant: await agentGrant('flappy'), host: 'flappy', classes: ['image'], batches: () => 'fail' });
    await flappy.welcomed;
    const card = page.locator(hostCard('flappy'));
    await expect.poll(() => card.getAttribute('data-state')).toBe('healthy');
    await page.evaluate(() => {
      const win = window as unknown as { __breaker: string[] };
      win.__breaker = [];
      // Every state flappy/gen's breaker is shown in, in order.
      new MutationObserver(() => {
        const state = document.querySelector<HTMLElement>('.host[data-host="flappy"] .replica[data-model="gen"] .breaker')?.dataset.state;
        if (state && win.__breaker.at(-1) !== state) win.__breaker.push(state);
      }).observe(document.getElementById('hosts')!, { childList: true, subtree: true });
    });

    const breakerOf = async (): Promise<string | undefined> =>
      (await hostsNow()).find((host) => host.id === 'flappy')?.replicas.find((replica) => replica.model === 'gen')?.breaker.state;
    const deadline = Date.now() + 20_000;
    let wave = 0;
    // Waves of small jobs until flappy has failed enough to open its breaker (bounded in time); clients still see successes.
    while ((await breakerOf()) !== 'open' && Date.now() < deadline) {
      const jobs = await Promise.all(Array.from({ length: 6 }, (_, i) =>
        mesh!.client().submit({ type: 'image', input: { prompt: `wave ${wave} job ${i}`, width: 8, height: 8, steps: 1 } })));
      wave++;
      const ends = await Promise.all(jobs.map((job) => mesh!.client().follow(job.id)));
      expect(ends.map((end) => end.type)).toEqual(jobs.map(() => 'succeeded'));
    }
    expect(flappy.count('fail')).toBeGreaterThanOrEqual(2);

    await page.waitForFunction(() => (window as unknown as { __breaker: string[] }).__breaker.includes('open'), null, { timeout: 10_000 });
    const opened = page.locator('.activity li[data-type="breaker:opened"][data-host="flappy"]');
    await opened.waitFor();
    expect(await opened.textContent()).toMatch(/breaker of flappy\/gen opened for 3 s: ENGINE_FAILED: scripted failure/);
    // The open breaker is counted (the summary turns red) and says when its trial comes, while it lasts.
    await page.screenshot({ path: SCREENSHOT, fullPage: true });
    // The trial is a probe, which the scripted host answers: half-open, then closed.
    await page.waitForFunction(() => (window as unknown as { __breaker: string[] }).__breaker.at(-1) === 'closed', null, { timeout: 15_000 });
    const states = await page.evaluate(() => (window as unknown as { __breaker: string[] }).__breaker);
    expect(states.slice(states.indexOf('open'))).toEqual(expect.arrayContaining(['open', 'closed']));
    await page.locator('.activity li[data-type="breaker:closed"][data-host="flappy"]').waitFor();
    expect(flappy.probes).toBeGreaterThanOrEqual(1);
    expect(pageErrors).toEqual([]);
  });

  it('shows a host an admin drains as draining at once', async () => {
    const drained = await mesh!.client().request<{ host: string; draining: boolean }>('POST', '/v1/hosts/flappy/drain', {});
    expect(drained).toMatchObject({ host: 'flappy', draining: true });
    const card = page.locator(hostCard('flappy'));
    await expect.poll(() => card.getAttribute('data-state')).toBe('draining');
    expect(await card.locator('.state').textContent()).toBe('Draining');
    await page.locator('.activity li[data-type="host:draining"][data-host="flappy"]').waitFor();
    expect(pageErrors).toEqual([]);
  });

  it('shows a host that drained and left as grey "left (drained)", not red "Lost", and no longer missing', async () => {
    // What a real agent does once its work is done: close the link with 1000 (the orchestrator records host:left).
    flappy!.socket.close(1000);
    const card = page.locator(hostCard('flappy'));
    await expect.poll(() => card.getAttribute('data-state')).toBe('left');
    expect(await card.locator('.state').textContent()).toBe('left (drained)');
    await expect.poll(() => card.locator('.load').textContent()).toMatch(/^drained and left · left \d+ s ago$/);
    await page.locator('.activity li[data-type="host:left"][data-host="flappy"]').waitFor();
    expect((await hostsNow()).find((host) => host.id === 'flappy')).toMatchObject({ connected: false, left: true });
    // Grey, not the red of a lost host.
    const colours = await page.evaluate(() => {
      const of = (selector: string): string => getComputedStyle(document.querySelector(selector)!).borderLeftColor;
      return { left: of('.host[data-host="flappy"]'), lost: of('.host[data-host="second"]') };
    });
    expect(colours.left).not.toBe(colours.lost);
    // Counted as gone on purpose: the local host of two expected hosts (second was lost, flappy left).
    expect(await page.locator('[data-tile="hosts"] .value').textContent()).toBe('1 / 2');
    await page.screenshot({ path: screenshotPath('mesh-view-drained-and-lost'), fullPage: true });
    expect(pageErrors).toEqual([]);
  });

  it('shows a host that yielded to its owner as such (not failed, not lost), with the reason; its GPU\'s heat and power', async () => {
    // A scripted host whose GPU reports 71 °C and 180 W and whose jobs report the energy they took (no GPU here).
    const gamer = new ScriptedAgent({
      url: mesh!.url, grant: await agentGrant('gamer', ['cloud']), host: 'gamer', classes: ['cloud'], batches: () => 'ok',
      gpu: { temperatureC: 71, powerW: 180, powerLimitW: 175 },
    });
    try {
      await gamer.welcomed;
      const card = page.locator(hostCard('gamer'));
      await card.waitFor();
      await expect.poll(() => card.locator('.device .heat').textContent(), { timeout: 10_000 }).toBe('71 °C');
      expect(await card.locator('.device .power').textContent()).toBe('180 W / 175 W');
      gamer.setAway({ state: 'yielded', reason: 'game.exe holds 6.1 GB on gpu0', since: Date.now(), until: null });
      await expect.poll(() => card.getAttribute('data-state'), { timeout: 10_000 }).toBe('yielded');
      expect(await card.locator('.state').textContent()).toBe('Yielded to its owner');
      expect(await card.locator('.away').textContent()).toMatch(/^game\.exe holds 6\.1 GB on gpu0 · since (now|\d+ s ago)$/);
      await page.screenshot({ path: screenshotPath('mesh-view-host-yielded'), fullPage: true });
      gamer.setAway(null);
      await expect.poll(() => card.getAttribute('data-state'), { timeout: 10_000 }).toBe('healthy');
    } finally {
      await gamer.close();
    }
    expect(pageErrors).toEqual([]);
  });

  it('says which job types a host cannot serve and why (host.unavailable, e.g. video without ffmpeg)', async () => {
    // The field comes from the host; here the answer is amended in the browser, so the view is tested on its own.
    await page.route('**/v1/hosts', async (route) => {
      const response = await route.fetch();
      const body = await response.json() as { hosts: (HostView & { unavailable?: Record<string, string> })[] };
      for (const host of body.hosts) if (host.id === localHost) host.unavailable = { ...host.unavailable, video: 'ffmpeg not found' };
      // A poll still being amended when the test unroutes has been answered by then: nothing more to do with it.
      await route.fulfill({ response, json: body }).catch((error: Error) => {
        if (!/already handled/.test(error.message)) throw error;
      });
    });
    try {
      await page.reload();
      const note = page.locator(`${hostCard(localHost)} .unavailable li[data-type="video"]`);
      await note.waitFor();
      expect(await note.textContent()).toBe('video: off — ffmpeg not found');
      await page.screenshot({ path: screenshotPath('mesh-view-host-without-video'), fullPage: true });
    } finally {
      await page.unroute('**/v1/hosts');
    }
    expect(pageErrors).toEqual([]);
  });

  it('plots the last minutes from /v1/series (jobs/s, queue depth, p50/p99 latency per model, memory per device), live', async () => {
    const grant = new URL(meshUrl).hash.slice('#grant='.length);
    const series = await waitFor(async () => {
      const response = await fetch(`${mesh!.url}/v1/series`, { headers: { authorization: `Bearer ${decodeURIComponent(grant)}` } });
      expect(response.status).toBe(200);
      const view = await response.json() as { times: number[]; models: Record<string, { succeededPerSecond: (number | null)[]; p99Ms: (number | null)[] }>; devices: Record<string, unknown> };
      return view.times.length >= 2 ? view : null;
    }, { timeoutMs: 15_000, what: 'two points of the series' });
    // Jobs ran on gen during this file: some step saw them succeed, with a latency.
    expect(series.models.gen!.succeededPerSecond.some((value) => (value ?? 0) > 0)).toBe(true);
    expect(series.models.gen!.p99Ms.some((value) => (value ?? 0) > 0)).toBe(true);
    expect(Object.keys(series.devices)).toContain(`${localHost}/${(await hostsNow()).find((host) => host.id === localHost)!.devices[0]!.id}`);
    for (const plot of ['jobs', 'queue', 'latency', 'memory']) {
      const figure = page.locator(`.plot[data-plot="${plot}"]`);
      await expect.poll(async () => Number(await figure.getAttribute('data-points')), { timeout: 12_000 }).toBeGreaterThanOrEqual(2);
      expect(await figure.locator('canvas').count()).toBe(1);
    }
    expect(await page.locator('.plot[data-plot="latency"]').getAttribute('data-series')).toContain('gen p99');
    // Live: a new point arrives without a reload.
    const before = Number(await page.locator('.plot[data-plot="jobs"]').getAttribute('data-points'));
    await page.evaluate(() => { (window as unknown as { __marker: string }).__marker = 'plots live'; });
    await expect.poll(async () => Number(await page.locator('.plot[data-plot="jobs"]').getAttribute('data-points')), { timeout: 12_000 })
      .toBeGreaterThan(Math.min(before, 179));
    expect(await page.evaluate(() => (window as unknown as { __marker?: string }).__marker)).toBe('plots live');
    await page.locator('#plots').screenshot({ path: screenshotPath('mesh-view-plots') });
    expect(pageErrors).toEqual([]);
  });

  it('fits a phone-sized screen: no sideways scrolling', async () => {
    const phone = await browser!.newPage({ viewport: { width: 390, height: 844 }, isMobile: true, hasTouch: true });
    phone.on('pageerror', (error) => pageErrors.push(error.message));
    await phone.goto(meshUrl);
    await phone.locator(hostCard(localHost)).waitFor();
    await expect.poll(async () => Number(await phone.locator('.plot[data-plot="jobs"]').getAttribute('data-points'))).toBeGreaterThanOrEqual(1);
    expect(await phone.evaluate(() => document.documentElement.scrollWidth)).toBeLessThanOrEqual(390);
    await phone.screenshot({ path: screenshotPath('mesh-view-phone'), fullPage: true });
    await phone.close();
    expect(pageErrors).toEqual([]);
  });

  it('tells a gallery grant that it cannot read the mesh, and asks for the mesh link', async () => {
    const other = await browser!.newPage(); // a new tab: its own sessionStorage
    other.on('pageerror', (error) => pageErrors.push(error.message));
    await other.goto(`${mesh!.url}/mesh`);
    await other.getByRole('heading', { name: 'The mesh view needs a grant' }).waitFor();
    await other.getByRole('textbox', { name: 'Grant' }).fill(mesh!.galleryUrl);
    await other.getByRole('button', { name: 'Open the mesh view' }).click();
    await expect.poll(() => other.locator('#grant-error').textContent()).toMatch(/^This grant cannot read the mesh \(.*mesh:read.*\)\. Use the mesh link/);
    expect(await other.locator('#app').isHidden()).toBe(true);
    await other.getByRole('textbox', { name: 'Grant' }).fill(meshUrl);
    await other.getByRole('button', { name: 'Open the mesh view' }).click();
    await other.locator(hostCard(localHost)).waitFor();
    await other.close();
    expect(pageErrors).toEqual([]);
  });
});
