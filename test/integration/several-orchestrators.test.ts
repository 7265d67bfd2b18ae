import { once } from 'node:events';
import { existsSync, readFileSync } from 'node:fs';
import { connect, createServer, type AddressInfo, type Socket } from 'node:net';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MeshClient } from '../../src/cli/common/client.js';
import type { JobView } from '../../src/protocol/api/index.js';
import { removeDir, tempDir, waitFor } from '../helpers/mesh.js';
import { freePort, freePorts, gpumesh, gpumeshRun, waitHealthy, type Proc } from '../helpers/processes.js';
import { standbyStandin, type StandbyStandin } from '../helpers/standby-standin.js';

/**
 * Agents and the CLI given several orchestrator URLs (`--join a,b`, `--url a,b`), against real processes over real
 * sockets. Two real orchestrators on separate data cannot stand for an active one and its standby (they share no
 * store), so a standby is a stand-in (test/helpers/standby-standin.ts: a plain HTTP server answering everything 503
 * NOT_LEADER), and a takeover is an orchestrator SIGKILLed and another started on its data folder, reached at the
 * second URL — where the stand-in standby answered until then.
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

/**
 * The second URL: a TCP proxy on loopback to one port, then another — a standby, then the orchestrator that took over.
 * Switching cuts the connections it carried, as a standby's server does when its orchestrator takes the port over.
 */
async function switchingProxy(port: number): Promise<{ url: string; switchTo(port: number): void; close(): Promise<void> }> {
  let target = port;
  const sockets = new Set<Socket>();
  const server = createServer((client) => {
    const upstream = connect(target, '127.0.0.1');
    for (const socket of [client, upstream]) {
      sockets.add(socket);
      socket.on('error', () => {}).on('close', () => {
        sockets.delete(socket);
        client.destroy();
        upstream.destroy();
      });
    }
    client.pipe(upstream).pipe(client);
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    switchTo(next) {
      target = next;
      for (const socket of sockets) socket.destroy();
    },
    async close() {
      for (const socket of sockets) socket.destroy();
      await new Promise((resolve) => server.close(resolve));
    },
  };
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
    await waitHealthy(url);
    // Taken once the orchestrator listens: before, the kernel could hand out the port it was about to take.
    dead = `http://127.0.0.1:${await freePort()}`;
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
    // The orchestrator is ready once it welcomed the agent; the agent's log line says so a moment later.
    await waitFor(() => links(agent).length > 0, { what: 'the agent to log its link' });
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
    // status asks three things at once (each passes the standby); submit passes it once, then stays with the orchestrator.
    expect(standby.requests.slice(before).sort()).toEqual(['GET /v1/hosts', 'GET /v1/status', 'GET /v1/storage', 'POST /v1/jobs']);
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

describe('an agent and the CLI when the orchestrator dies and the standby at the second URL takes over', () => {
  it('the agent links to the second within a second of the takeover; a job followed by the CLI across it completes', { timeout: 150_000 }, async () => {
    const data = tempDir();
    const [portA, portB] = (await freePorts(2)) as [number, number];
    const first = `http://127.0.0.1:${portA}`;
    const a = serve(data, portA);
    const standby = await standbyStandin();
    const proxy = await switchingProxy(Number(new URL(standby.url).port));
    const second = proxy.url;
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
    // The orchestrator that takes over starts on the dead one's data (nothing else uses it now), on a port of its own;
    // until it listens the second URL is the standby's, and the agent goes round the dead URL and the standby.
    const b = serve(data, portB);
    await waitHealthy(`http://127.0.0.1:${portB}`);
    const refusedBefore = standby.upgrades();
    proxy.switchTo(portB);
    const tookOverAt = Date.now();
    const relinked = await waitFor(() => links(agent).find((line) => line.url === second), { timeoutMs: 15_000, what: 'the agent to link to the second' });
    const killToLink = relinked.time - killedAt;
    const takeoverToLink = relinked.time - tookOverAt;
    process.stdout.write(`failover: SIGKILL -> agent linked to the second URL in ${killToLink} ms; the takeover came ${tookOverAt - killedAt} ms after the kill (the new orchestrator starting), and the agent linked ${takeoverToLink} ms after it\n`);
    expect(refusedBefore).toBeGreaterThan(0); // the standby turned it away while the takeover was under way
    // After a round that met a standby, the next comes within a second (STANDBY_ROUND_MS), whatever the backoff says.
    expect(takeoverToLink).toBeLessThan(2000);

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
    await proxy.close();
    await standby.close();
    if (existsSync(data)) removeDir(data);
  });
});
