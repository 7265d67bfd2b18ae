import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { MeshClient } from '../../src/cli/common/client.js';
import type { JobView } from '../../src/protocol/api/index.js';
import { removeDir, tempDir, waitFor } from '../helpers/mesh.js';
import { freePort, gpumesh, waitHealthy, type Proc } from '../helpers/processes.js';

const procs: Proc[] = [];
afterAll(async () => {
  for (const proc of procs) await proc.kill('SIGKILL');
});

describe('durability', () => {
  it('jobs queued or running when the orchestrator is SIGKILLed complete after it restarts', { timeout: 120_000 }, async () => {
    const data = tempDir();
    const port = await freePort();
    const url = `http://127.0.0.1:${port}`;
    const serve = (): Proc => {
      const proc = gpumesh(['serve', '--data', data, '--port', String(port)], { GPUMESH_LOG_LEVEL: 'info' });
      procs.push(proc);
      return proc;
    };
    const first = serve();
    await waitHealthy(url);
    const admin = readFileSync(join(data, 'admin.grant'), 'utf8').trim();
    const client = new MeshClient(url, admin);
    const { token } = await client.request<{ token: string }>('POST', '/v1/grants', { kind: 'agent', host: 'box', classes: ['image'] });
    const agent = gpumesh(['agent', '--url', url, '--host', 'box', '--classes', 'image', '--data', join(data, 'agent')], { GPUMESH_GRANT: token, GPUMESH_LOG_LEVEL: 'debug' });
    procs.push(agent);
    await waitFor(async () => (await fetch(`${url}/readyz`)).ok, { what: 'the agent to join' });

    const ids: string[] = [];
    for (let i = 0; i < 6; i++) {
      const job = await client.submit({ type: 'image', input: { prompt: `survivor ${i}`, seed: i, width: 256, height: 256, steps: 8 } });
      ids.push(job.id);
    }
    await waitFor(async () => (await client.job(ids[0]!)).status !== 'queued', { what: 'the first job to be dispatched' });
    await first.kill('SIGKILL');
    const killedAt = Date.now();

    serve();
    await waitHealthy(url);
    let last: JobView[] = [];
    const jobs = await waitFor(async () => {
      last = await Promise.all(ids.map((id) => client.job(id)));
      return last.every((view) => view.status === 'succeeded') ? last : null;
    }, { timeoutMs: 40_000, what: 'every job to succeed after the restart' }).catch((error: Error) => {
      const states = last.map((view) => `${view.id} ${view.status} attempts=${JSON.stringify(view.attempts.map((a) => [a.status, a.host, a.error?.code]))}`);
      throw new Error(`${error.message}\n${states.join('\n')}\nagent:\n${agent.output().slice(-3000)}\nserve:\n${procs.at(-1)!.output().slice(-3000)}`);
    });
    for (const job of jobs as JobView[]) {
      expect(job.artifacts).toHaveLength(1);
      expect(job.error).toBeNull();
    }
    // Work was really cut off: some jobs were still unfinished when the orchestrator died.
    expect((jobs as JobView[]).some((job) => Date.parse(job.finishedAt!) > killedAt)).toBe(true);
    expect(agent.child.exitCode).toBeNull(); // the agent rode out the restart
    removeDir(data);
  });
});
