import { execFileSync } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { readFileSync } from 'node:fs';
import { launchFlags, meshForFile, waitFor } from '../helpers/mesh.js';

// The local agent as a process of its own (`--agent-process`): over the WebSocket link, restarted by `up` when it dies.
const running = meshForFile({ args: ['--agent-process'] });

/** Read an SSE response until `done` says stop; returns the raw text. */
async function readEvents(response: Response, done: (text: string) => boolean): Promise<string> {
  let text = '';
  const decoder = new TextDecoder();
  for await (const chunk of response.body!) {
    text += decoder.decode(chunk as Uint8Array, { stream: true });
    if (done(text)) break;
  }
  return text;
}

describe('recovery', () => {
  it('an event stream resumed with Last-Event-ID replays what it missed; an unknown id asks for a resync', async () => {
    const headers = { authorization: `Bearer ${running().admin}` };
    const first = await fetch(`${running().url}/v1/events`, { headers });
    const id = (await running().client().submit({ type: 'image', input: { prompt: 'one', width: 32, height: 32, steps: 1 } })).id;
    const seen = await readEvents(first, (text) => text.includes(`"type":"queued","jobId":"${id}"`));
    // Resume from the queued event, as a client that dropped right after it would.
    const lastId = new RegExp(`id: (\\S+)\\nevent: queued\\ndata: \\{"type":"queued","jobId":"${id}"`).exec(seen)![1]!;
    // While disconnected, a job runs to the end.
    await running().client().follow(id);
    const resumed = await fetch(`${running().url}/v1/events`, { headers: { ...headers, 'last-event-id': lastId } });
    const replay = await readEvents(resumed, (text) => text.includes(`"type":"succeeded","jobId":"${id}"`));
    expect(replay).toContain(`"type":"dispatched","jobId":"${id}"`);
    expect(replay).not.toContain(`"type":"queued","jobId":"${id}"`);
    const stale = await fetch(`${running().url}/v1/events`, { headers: { ...headers, 'last-event-id': 'zzz.1' } });
    expect(await readEvents(stale, (text) => text.includes('event: resync'))).toContain('event: resync');
  });

  it('gpumesh up restarts its local agent when the agent dies', async () => {
    const pids = () => execFileSync('pgrep', ['-f', `gpumesh.js agent .*${running().data}/agent`]).toString().trim().split('\n').map(Number);
    // Node's options as the agent was started with (its command line, NUL-separated): the command's own, like `up`'s.
    const nodeOptions = (agent: number) => readFileSync(`/proc/${agent}/cmdline`, 'utf8').split('\0').slice(1, 1 + launchFlags().length);
    const [pid] = pids();
    expect(nodeOptions(pid!)).toEqual(launchFlags());
    process.kill(pid!, 'SIGKILL');
    await waitFor(async () => {
      try {
        const ready = await fetch(`${running().url}/readyz`);
        return ready.ok && !pids().includes(pid!);
      } catch {
        return false;
      }
    }, { timeoutMs: 30_000, what: 'a new local agent to join' });
    expect(nodeOptions(pids()[0]!)).toEqual(launchFlags());
    const job = await running().client().submit({ type: 'image', input: { prompt: 'after the restart', width: 32, height: 32, steps: 1 } });
    expect((await running().client().follow(job.id)).type).toBe('succeeded');
  });

  it('lists several states at once', async () => {
    const page = await running().client().request<{ jobs: { status: string }[] }>('GET', '/v1/jobs?status=queued,succeeded');
    expect(page.jobs.length).toBeGreaterThan(0);
    await expect(running().client().request('GET', '/v1/jobs?status=queued,bogus')).rejects.toThrow(/unknown status bogus/);
  });
});
