import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ApiError } from '../../src/cli/common/client.js';
import { GALLERY_GRANT_SUMMARY } from '../../src/protocol/api/index.js';
import type { ExplainView, HostView } from '../../src/protocol/api/index.js';
import { meshForFile, waitFor } from '../helpers/mesh.js';
import { gpumesh, gpumeshRun } from '../helpers/processes.js';

// `gpumesh up` on a machine where the agent finds no ffmpeg: GPUMESH_FFMPEG names a program that is not there, so
// neither the system's nor the packaged one is used (the lookup is injectable; nothing is uninstalled). Real processes.
const MISSING = '/nonexistent/ffmpeg';
const mesh = meshForFile({ env: { GPUMESH_FFMPEG: MISSING } });
const REASON = `ffmpeg not found (GPUMESH_FFMPEG=${MISSING}: cannot start "${MISSING}": no executable file there)`;

const hostsNow = async (): Promise<HostView[]> => (await mesh().client().request<{ hosts: HostView[] }>('GET', '/v1/hosts')).hosts;

describe('a host without ffmpeg says so everywhere a person looks', () => {
  it('the up banner, the agent log, /v1/hosts (the mesh view\'s data) and gpumesh status say video is off and why', async () => {
    expect(mesh().output()).toContain(`           video: off — ${REASON}`);
    expect(mesh().output()).toContain('(a clip: refused while video is off here)');
    expect(mesh().output()).toContain(`export GPUMESH_HOME=${mesh().data}`);
    // The gallery grant, described as everywhere else (test/cli/common/help-layout.test.ts).
    expect(mesh().output()).toContain(`${GALLERY_GRANT_SUMMARY} in album default`);
    const [host] = await hostsNow();
    expect(host).toMatchObject({ classes: ['image', 'tensor'], unavailable: { video: REASON }, tools: [] });
    const log = readFileSync(join(mesh().data, 'logs', 'agent.log'), 'utf8');
    expect(log.split('not serving the video class').length - 1).toBe(1);

    const status = await gpumeshRun(['status', '--data', mesh().data]);
    expect(status.code, status.output).toBe(0);
    expect(status.stdout).toContain(`${host!.id}  video: off — ${REASON}`);
  }, 60_000);

  it('images still run; a clip is refused at once with 422 CLASS_UNAVAILABLE naming the host and the reason, not queued for ever', async () => {
    const client = mesh().client();
    const image = await client.submit({ type: 'image', input: { prompt: 'still works', width: 32, height: 32, steps: 1 } });
    expect((await client.follow(image.id)).type).toBe('succeeded');

    const refused = await client.submit({ type: 'video', input: { prompt: 'waits', frames: 2, width: 16, height: 16, steps: 1 } }).catch((error: unknown) => error);
    expect(refused).toBeInstanceOf(ApiError);
    expect(refused).toMatchObject({ status: 422, code: 'CLASS_UNAVAILABLE', message: expect.stringContaining(`video: ${REASON}`) });
    const cli = await gpumeshRun(['submit', '--data', mesh().data, '--frames', '2', '--prompt', 'from the cli']);
    expect(cli.code).not.toBe(0);
    expect(cli.output).toContain('No host can run a video job');
  }, 60_000);

  it('with a video host expected back (it joined and left), a clip queues, and explain says what each host lacks', async () => {
    const client = mesh().client();
    const { token } = await client.request<{ token: string }>('POST', '/v1/grants', { kind: 'agent', host: 'videobox', classes: ['video'] });
    const agent = gpumesh(['agent', '--url', mesh().url, '--host', 'videobox', '--classes', 'video', '--data', join(mesh().data, 'agent-videobox'), '--cpu-budget', '512'], { GPUMESH_GRANT: token });
    await waitFor(async () => (await hostsNow()).some((host) => host.id === 'videobox' && host.connected), { timeoutMs: 60_000, what: 'videobox to join' });
    // It drains and leaves (SIGTERM); it may come back, so clips wait for it.
    await agent.kill('SIGTERM');
    await waitFor(async () => (await hostsNow()).some((host) => host.id === 'videobox' && !host.connected), { what: 'videobox to leave' });

    const clip = await client.submit({ type: 'video', input: { prompt: 'waits', frames: 2, width: 16, height: 16, steps: 1 } });
    const explained = await waitFor(async () => {
      const answer = await client.request<ExplainView>('GET', `/v1/jobs/${clip.id}/explain`);
      return answer.waiting ? answer : null;
    }, { what: 'the clip to be explained' });
    const local = (await hostsNow()).find((host) => host.connected)!.id;
    expect(explained).toMatchObject({
      status: 'queued',
      waiting: {
        for: 'a host of its classes',
        hosts: expect.arrayContaining([
          { host: 'videobox', class: 'video', canTake: false, reason: 'disconnected', detail: null },
          { host: local, class: null, canTake: false, reason: 'class unavailable', detail: `video: ${REASON}` },
        ]),
      },
    });
    expect(explained.summary).toContain(`${local}: cannot serve video: ${REASON}`);
    const text = await gpumeshRun(['explain', clip.id, '--data', mesh().data]);
    expect(text.stdout).toContain(`class unavailable — video: ${REASON}`);
    await client.request('DELETE', `/v1/jobs/${clip.id}`);

    // `submit --wait` does not just say "queued": after a moment its progress line gives the same reason.
    const waiting = gpumesh(['submit', '--data', mesh().data, '--frames', '2', '--prompt', 'waits too', '--wait']);
    // The progress line is cut at the terminal's width (80 columns without one): the reason's start is what shows.
    await waitFor(() => /queued: waiting for a host of its classes: no usable host serves video \(.*cannot serve video/.test(waiting.output()), { timeoutMs: 30_000, what: 'submit --wait to say why its clip waits' });
    await waiting.kill('SIGTERM');
    for (const job of (await client.request<{ jobs: { id: string; status: string }[] }>('GET', '/v1/jobs?status=queued')).jobs) await client.request('DELETE', `/v1/jobs/${job.id}`);
  }, 90_000);
});
