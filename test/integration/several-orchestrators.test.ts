import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MeshClient } from '../../src/cli/common/client.js';
import type { JobView } from '../../src/protocol/index.js';
import { removeDir, tempDir, waitFor } from '../helpers/mesh.js';
import { freePort, gpumesh, gpumeshRun, waitHealthy, type Proc } from '../helpers/processes.js';
import { standbyStandin, type StandbyStandin } from '../helpers/standby-standin.js';

/**
 * Agents and the CLI given several orchestrator URLs (`--join a,b`, `--url a,b`), against real processes over real
 * sockets. Two real orchestrators on separate data cannot stand for an active one and its standby (they share no
 * store), so a standby is a stand-in (test/helpers/standby-standin.ts: a plain HTTP server answering everything 503
 * NOT_LEADER), and a takeover is an orchestrator SIGKILLed and another started on its data folder at the second URL.
 */

const procs: Proc[] = [];
afterAll(async () => {
  for (const proc of procs.reverse()) await proc.kill('SIGKILL');
});

function serve(data: string, port: number): Proc {
  const proc = gpumesh(['serve', '--data', data, '--port', String(port)], { GPUMESH_LOG_LEVEL: 'info' });
  procs.push(proc);
  return proc;
}

/** The agent's JSON log lines that say it linked, with the URL and the time (pino's `time`, ms). */
function links(agent: Proc): { url: string; time: number }[] {
  return agent.stdout().split('\n').filter((line) => line.includes('"linked to the orchestrator"'))
    .map((line) => JSON.parse(line) as { url: string; time: number });
}

const IMAGE = (prompt: string, seed: number): Record<string, unknown> => ({ type: 'image', input: { prompt, seed, width: 64, height: 64, steps: 2 } });

describe('an agent and the CLI with a standby among their URLs', () => {
  let data: string;
  let url: string;
  let admin: string;
  let standby: StandbyStandin;
  let agent: Proc;
  let dead: string;

  beforeAll(async () => {
    data = tempDir();
    url = `http://127.0.0.1:${await freePort()}`;
    serve(data, Number(new URL(url).port));
    standby = await standbyStandin();
    dead = `http://127.0.0.1:${await freePort()}`;
    await waitHealthy(url);
    admin = readFileSync(join(data, 'admin.grant'), 'utf8').trim();
    const { token } = await new MeshClient(url, admin).request<{ token: string }>('POST', '/v1/grants', { kind: 'agent', host: 'box', classes: ['image'] });
    // The standby first: the agent must get past it to the orchestrator.
    agent = gpumesh(['agent', '--join', `${standby.url},${url}`, '--grant', token, '--data', join(data, 'agent')], { GPUMESH_LOG_LEVEL: 'info' });
    procs.push(agent);
  }, 60_000);
  afterAll(async () => {
    await standby.close();
    for (const proc of procs.splice(0).reverse()) await proc.kill('SIGKILL');
    removeDir(data);
  });

  it('`gpumesh agent --join <standby>,<orchestrator>` skips the standby, links to the orchestrator and runs a job', { timeout: 60_000 }, async () => {
    await waitFor(async () => (await fetch(`${url}/readyz`)).ok, { what: 'the agent to join' });
    expect(links(agent).map((line) => line.url)).toEqual([url]);
    expect(standby.upgrades()).toBe(1); // asked once, answered 503 NOT_LEADER, and left
    expect(agent.output()).toContain('this orchestrator is a standby; not linking to it');
    const client = new MeshClient(url, admin);
    const job = await client.submit(IMAGE('past the standby', 1));
    expect((await client.follow(job.id)).type).toBe('succeeded');
  });

  it('the CLI goes past a dead URL and a standby to the orchestrator, and stays with it for the rest of the command', { timeout: 60_000 }, async () => {
    const env = { GPUMESH_GRANT: admin };
    const before = standby.requests.length;
    const status = await gpumeshRun(['status', '--url', `${dead},${standby.url},${url}`], env);
    expect(status.code, status.output).toBe(0);
    expect(status.stdout).toContain(`mesh at ${url}`);
    expect(status.stdout).toContain('box');
    const submit = await gpumeshRun(['submit', '--url', `${dead},${standby.url},${url}`, '--prompt', 'via the CLI', '--size', '64x64', '--steps', '2', '--wait', '--no-save'], env);
    expect(submit.code, submit.output).toBe(0);
    expect(submit.stdout).toMatch(/succeeded/);
    // status asks two things at once (both pass the standby); submit passes it once, then stays with the orchestrator.
    expect(standby.requests.slice(before).sort()).toEqual(['GET /v1/hosts', 'GET /v1/status', 'POST /v1/jobs']);
    // The same list in GPUMESH_URL.
    const viaEnv = await gpumeshRun(['jobs', 'list'], { ...env, GPUMESH_URL: `${dead},${standby.url},${url}` });
    expect(viaEnv.code, viaEnv.output).toBe(0);
    expect(viaEnv.stdout).toContain('succeeded');
  });

  it('with no active orchestrator among its URLs the CLI exits non-zero, naming NOT_LEADER and each URL it tried', { timeout: 30_000 }, async () => {
    const env = { GPUMESH_GRANT: admin };
    const alone = await gpumeshRun(['status', '--url', standby.url], env);
    expect(alone.code).not.toBe(0);
    expect(alone.output).toContain('NOT_LEADER');
    expect(alone.output).toContain(standby.url);
    const both = await gpumeshRun(['status', '--url', `${dead},${standby.url}`], env);
    expect(both.code).not.toBe(0);
    expect(both.output).toMatch(/gpumesh: no active orchestrator at any of the 2 orchestrators \(from --url\)/);
    expect(both.output).toContain(`${dead}: cannot connect`);
    expect(both.output).toContain(`${standby.url}: NOT_LEADER`);
  });

  it('a 400 from the orchestrator is the answer: not sent on to the next URL', { timeout: 30_000 }, async () => {
    const before = standby.requests.length;
    const refused = await gpumeshRun(['submit', '--url', `${url},${standby.url}`, '--type', 'image', '--input', '{"prompt": "too small", "width": 3}'], { GPUMESH_GRANT: admin });
    expect(refused.code).not.toBe(0);
    expect(refused.output).toMatch(/width/i);
    expect(standby.requests.length).toBe(before);
  });

  it('a bad URL in the list stops the command before anything is sent, naming it', async () => {
    const bad = await gpumeshRun(['status', '--url', `${url},nas2:7070`], { GPUMESH_GRANT: admin });
    expect(bad.code).not.toBe(0);
    expect(bad.output).toContain('gpumesh: --url: "nas2:7070" is not an http:// or https:// URL');
    const join = await gpumeshRun(['agent', '--join', `${url},nas2`, '--grant', 'unused'], {});
    expect(join.code).not.toBe(0);
    expect(join.output).toContain('gpumesh: --join: "nas2" is not a URL');
  });
});

describe('an agent and the CLI when the orchestrator dies and another takes over at the second URL', () => {
  it('the agent links to the second within seconds; a job followed by the CLI across the failover completes', { timeout: 150_000 }, async () => {
    const data = tempDir();
    const [portA, portB] = [await freePort(), await freePort()];
    const [first, second] = [`http://127.0.0.1:${portA}`, `http://127.0.0.1:${portB}`];
    const a = serve(data, portA);
    await waitHealthy(first);
    const admin = readFileSync(join(data, 'admin.grant'), 'utf8').trim();
    const { token } = await new MeshClient(first, admin).request<{ token: string }>('POST', '/v1/grants', { kind: 'agent', host: 'box', classes: ['image'] });
    const agent = gpumesh(['agent', '--join', `${first},${second}`, '--grant', token, '--data', join(data, 'agent')], { GPUMESH_LOG_LEVEL: 'info' });
    procs.push(agent);
    await waitFor(async () => (await fetch(`${first}/readyz`)).ok, { what: 'the agent to join the first' });
    const client = new MeshClient([first, second], admin);
    // A warm-up job loads the model, so the slow job below is running (not loading) when the orchestrator dies.
    expect((await client.follow((await client.submit(IMAGE('warm', 1))).id)).type).toBe('succeeded');

    // A slow job, followed by the CLI: 1024x1024 in 32 steps runs for seconds on the built-in generator. Its progress
    // (printed each second where stderr is not a terminal) says its event stream is open before the orchestrator dies.
    const watch = gpumesh(['submit', '--url', `${first},${second}`, '--prompt', 'across the failover', '--seed', '7', '--size', '1024x1024', '--steps', '32', '--wait', '--no-save'], { GPUMESH_GRANT: admin });
    procs.push(watch);
    await waitFor(() => {
      if (watch.child.exitCode !== null) throw new Error(`the CLI ended before the failover:\n${watch.output()}`);
      return watch.output().includes('running on box');
    }, { timeoutMs: 30_000, what: 'the CLI to follow the slow job running' });
    const running = await waitFor(async () => {
      const page = await client.request<{ jobs: JobView[] }>('GET', '/v1/jobs?limit=5');
      return page.jobs.find((job) => job.status === 'running' && job.input.prompt === 'across the failover');
    }, { what: 'the slow job to be running' });

    await a.kill('SIGKILL');
    const killedAt = Date.now();
    // A standby would be running already; here the second starts now, on the first's data (it is dead: nothing shares it).
    const b = serve(data, portB);
    const listening = await waitFor(() => {
      const line = b.output().split('\n').find((text) => text.includes('"orchestrator listening"'));
      return line ? (JSON.parse(line) as { time: number }).time : null;
    }, { timeoutMs: 30_000, what: 'the second orchestrator to listen' });
    const relinked = await waitFor(() => links(agent).find((line) => line.url === second), { timeoutMs: 15_000, what: 'the agent to link to the second' });
    const killToLink = relinked.time - killedAt;
    const listenToLink = relinked.time - listening;
    process.stdout.write(`failover: SIGKILL -> agent linked to the second URL in ${killToLink} ms (the second orchestrator listened ${listening - killedAt} ms after the kill; linked ${listenToLink} ms after that)\n`);
    expect(listenToLink).toBeLessThan(5000);
    expect(killToLink).toBeLessThan(5000 + (listening - killedAt));

    // The job in flight finishes on the agent, and its result reaches the second; the CLI, whose event stream broke
    // with the first, follows it there.
    const code = await watch.exited();
    expect(code, watch.output()).toBe(0);
    expect(watch.stdout()).toContain(`${running.id} succeeded`);
    // It really was cut off: it finished after the kill, so the CLI's stream to the first broke before its end.
    expect(Date.parse((await client.job(running.id)).finishedAt!)).toBeGreaterThan(killedAt);
    // A job submitted after the failover runs through the second.
    const after = await client.submit(IMAGE('after the failover', 2));
    expect(client.baseUrl).toBe(second);
    expect((await client.follow(after.id)).type).toBe('succeeded');
    expect(agent.child.exitCode).toBeNull();
    await b.kill();
    if (existsSync(data)) removeDir(data);
  });
});
