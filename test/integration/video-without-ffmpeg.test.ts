import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { meshForFile, waitFor } from '../helpers/mesh.js';

// `gpumesh up` on a machine without ffmpeg (GPUMESH_FFMPEG names a program that is not there): real processes.
const mesh = meshForFile({ env: { GPUMESH_FFMPEG: '/nonexistent/ffmpeg' } });

describe('a host without ffmpeg', () => {
  it('does not serve the video class: it says why once, images still run, and a clip waits for a host that can', async () => {
    const client = mesh().client();
    const hosts = await client.request<{ hosts: Array<{ classes: string[] }> }>('GET', '/v1/hosts');
    expect(hosts.hosts[0]!.classes).toEqual(['image', 'tensor']);
    const log = readFileSync(join(mesh().data, 'logs', 'agent.log'), 'utf8');
    expect(log.split('not serving the video class').length - 1).toBe(1);
    expect(log).toContain('not serving the video class: cannot start \\"/nonexistent/ffmpeg\\": no executable file there (install ffmpeg for video jobs)');

    const image = await client.submit({ type: 'image', input: { prompt: 'still works', width: 32, height: 32, steps: 1 } });
    expect((await client.follow(image.id)).type).toBe('succeeded');

    const clip = await client.submit({ type: 'video', input: { prompt: 'waits', frames: 2, width: 16, height: 16, steps: 1 } });
    const explained = await waitFor(async () => {
      const answer = await client.request<{ status: string; waiting?: { for: string } }>('GET', `/v1/jobs/${clip.id}/explain`);
      return answer.waiting ? answer : null;
    }, { what: 'the clip to be explained' });
    expect(explained).toMatchObject({ status: 'queued', waiting: { for: 'a host of its classes' } });
    expect((await client.job(clip.id)).status).toBe('queued');
  }, 60_000);
});
