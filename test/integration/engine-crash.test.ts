import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import type { JobEvent, JobView } from '../../src/protocol/api/index.js';
import { meshForFile, waitFor } from '../helpers/mesh.js';
import { childrenOf } from '../helpers/procfs.js';

/**
 * Engine crash recovery with real processes: `gpumesh up` runs the
 * orchestrator and its agent, and the agent's ONNX worker is a process of its
 * own; the test SIGKILLs the worker in the middle of a burst.
 */
const running = meshForFile();

/** The ONNX worker (if one runs now): a child of `gpumesh up`, whose local agent runs in its own process. */
const workerPids = (): number[] => childrenOf(running().process.pid!, 'worker.js').map((process) => process.pid);

describe('engine crash recovery', () => {
  it('a SIGKILLed engine mid-burst: every accepted job still succeeds, and the host serves the model again at once', async () => {
    const client = running().client();
    // 40 small images, several seconds of work for one replica (batches of 4, 24 steps each).
    const ids: string[] = [];
    for (let i = 0; i < 40; i++) {
      ids.push((await client.submit({ type: 'image', input: { prompt: `burst ${i}`, seed: i, width: 160, height: 160, steps: 24 } })).id);
    }
    // Kill the worker while it holds a batch: on a progress event early in a batch (most of its steps still to run).
    // Events reach us late on a loaded machine: if a kill missed (a batch started after it finished and no job was
    // retried), kill again in a later batch.
    let killed: number | null = null;
    let kills = 0;
    let hit = false;
    let missed = false;
    const dispatchedSinceKill = new Set<string>();
    const outcomes = ids.map((id) => client.follow(id, (event: JobEvent) => {
      if (event.type === 'dispatched') {
        if (event.attempt > 1) hit = true;
        else dispatchedSinceKill.add(event.jobId);
      }
      if (event.type === 'succeeded' && dispatchedSinceKill.has(event.jobId)) missed = !hit;
      const due = kills === 0 || (missed && dispatchedSinceKill.has(event.jobId));
      if (!hit && kills < 3 && due && event.type === 'progress' && event.step <= 6) {
        const [pid] = workerPids();
        if (pid) {
          killed = pid;
          kills++;
          missed = false;
          dispatchedSinceKill.clear();
          process.kill(pid, 'SIGKILL');
        }
      }
    }));
    const terminal = await Promise.all(outcomes);
    expect(killed, 'the worker was found and killed').not.toBeNull();
    const failed = terminal.filter((event) => event.type !== 'succeeded');
    expect(failed, JSON.stringify(failed.slice(0, 3))).toEqual([]);
    // The batch the worker held failed over with ENGINE_CRASHED and was retried.
    const views = await Promise.all(ids.map((id) => client.job(id)));
    const crashed = views.filter((view: JobView) => view.attempts.some((attempt) => attempt.error?.code === 'ENGINE_CRASHED'));
    expect(crashed.length).toBeGreaterThan(0);
    for (const view of crashed) expect(view.attempts.at(-1)!.status).toBe('succeeded');
    // A fresh engine process serves the model; a new job succeeds within a few seconds.
    const started = Date.now();
    const after = await client.submit({ type: 'image', input: { prompt: 'after the crash', width: 64, height: 64, steps: 2 } });
    expect((await client.follow(after.id)).type).toBe('succeeded');
    expect(Date.now() - started).toBeLessThan(5000);
    const workers = await waitFor(() => workerPids().length > 0 && workerPids(), { what: 'a live onnx worker' });
    expect(workers).not.toContain(killed);
    // The agent noticed the death at once and dropped the model (reported unloaded) instead of keeping the dead engine.
    expect(readFileSync(join(running().data, 'logs', 'agent.log'), 'utf8')).toContain('engine process died; model dropped');
  }, 120_000);
});
