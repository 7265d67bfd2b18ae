import { once } from 'node:events';
import { createServer, type AddressInfo, type Socket } from 'node:net';
import { pino } from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import WebSocket, { WebSocketServer } from 'ws';
import { AgentLink } from '../../../src/agent/link/link.js';
import { LinkWatchdog } from '../../../src/agent/link/link-watchdog.js';
import { FakeClock } from '../../helpers/fake-clock.js';
import { LINK_PROTOCOL_VERSION, type AgentMessage } from '../../../src/protocol/index.js';
import { ServerTrust } from '../../../src/tls-client/index.js';
import { waitFor } from '../../helpers/mesh.js';
import { freePort } from '../../helpers/processes.js';
import { standbyStandin } from '../../helpers/standby-standin.js';

describe('the agent link watchdog (fake clock)', () => {
  it('pings every interval while it hears something; terminates the socket after silentAfterMs of silence', () => {
    const timers = new FakeClock(0);
    const socket = { pings: 0, terminated: 0, ping() { this.pings++; }, terminate() { this.terminated++; } };
    const silences: number[] = [];
    const watchdog = new LinkWatchdog(socket, { intervalMs: 100, silentAfterMs: 300, onSilent: (ms) => silences.push(ms) }, timers);
    for (let i = 0; i < 10; i++) {
      timers.advance(100);
      watchdog.heard(); // a pong or a message each interval: alive
    }
    expect(socket).toMatchObject({ pings: 10, terminated: 0 });
    timers.advance(300); // silent for 300 ms: not yet more than silentAfterMs
    expect(socket.terminated).toBe(0);
    timers.advance(100);
    expect(socket).toMatchObject({ pings: 13, terminated: 1 });
    expect(silences).toEqual([400]);
    timers.advance(1000); // stopped: nothing more
    expect(socket).toMatchObject({ pings: 13, terminated: 1 });
  });

  it('stop() ends it', () => {
    const timers = new FakeClock(0);
    const socket = { pings: 0, terminated: 0, ping() { this.pings++; }, terminate() { this.terminated++; } };
    new LinkWatchdog(socket, { intervalMs: 100, silentAfterMs: 300, onSilent: () => {} }, timers).stop();
    timers.advance(1000);
    expect(socket).toMatchObject({ pings: 0, terminated: 0 });
  });
});

/**
 * A stand-in orchestrator on a real socket that welcomes each connection and then says nothing; with autoPong off
 * it does not answer pings either — what the agent sees when the network between them silently drops packets.
 */
interface SilentOrchestrator {
  url: string;
  connections: WebSocket[];
  /** Pings received from the agent so far. */
  pings(): number;
  /**
   * Ping the agent and wait for its pong: frames are handled in order, so every frame sent to the agent before
   * (the pong to its last ping) has been handled by then.
   */
  roundTrip(): Promise<void>;
  close(): Promise<void>;
}

async function silentOrchestrator(options: { answerPings: boolean }): Promise<SilentOrchestrator> {
  const server = new WebSocketServer({ host: '127.0.0.1', port: 0, autoPong: options.answerPings });
  await once(server, 'listening');
  const connections: WebSocket[] = [];
  let pings = 0;
  server.on('connection', (socket) => {
    connections.push(socket);
    socket.on('ping', () => pings++);
    socket.once('message', () => socket.send(JSON.stringify({
      type: 'welcome', session: `s${connections.length}`, heartbeatMs: 100, protocol: LINK_PROTOCOL_VERSION, inlineOutputBytes: 0, staleAfterMs: 400,
    })));
  });
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    connections,
    pings: () => pings,
    async roundTrip() {
      const socket = connections.at(-1)!;
      const pong = once(socket, 'pong');
      socket.ping();
      await pong;
    },
    async close() {
      for (const socket of server.clients) socket.terminate();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}

const hello = (): Extract<AgentMessage, { type: 'hello' }> => ({
  type: 'hello', protocol: LINK_PROTOCOL_VERSION, host: 'h', classes: ['image'], devices: [], engines: [], models: [], inFlight: [], concurrency: 1, version: 'test',
});

describe('the agent link over a real socket', () => {
  const cleanup: (() => Promise<void> | void)[] = [];
  afterEach(async () => {
    for (const step of cleanup.splice(0)) await step();
  });

  /** A real link on a real socket; its watchdog's and its redial backoff's time is `clock`. */
  async function link(url: string, clock: FakeClock): Promise<{ link: AgentLink; disconnects: number[] }> {
    const disconnects: number[] = [];
    const agentLink = new AgentLink({
      targets: [{ url, trust: new ServerTrust(url) }], grant: 'g', log: pino({ level: 'silent' }), hello, clock,
      onWelcome: () => {}, onMessage: () => {}, onRejected: () => {}, onDisconnected: () => disconnects.push(clock.now()),
    });
    agentLink.start();
    cleanup.push(() => agentLink.close());
    await waitFor(() => agentLink.connected, { what: 'the link to be welcomed' });
    return { link: agentLink, disconnects };
  }

  it('drops a link on which the orchestrator went silent (no messages, no pongs) and redials by itself', async () => {
    // Before the watchdog the agent believed such a link alive until TCP gave up (many minutes): found by the
    // netns scenario, where a cut laptop rejoined only when the orchestrator's close frame finally got through.
    const orchestrator = await silentOrchestrator({ answerPings: false });
    cleanup.push(() => orchestrator.close());
    const clock = new FakeClock(0);
    const { disconnects } = await link(orchestrator.url, clock);
    // staleAfterMs 400 from its welcome, checked every heartbeat (100 ms): it pings at 100–400 ms and hears nothing.
    for (let tick = 1; tick <= 4; tick++) {
      clock.advance(100);
      await waitFor(() => orchestrator.pings() >= tick, { what: `ping ${tick}` });
    }
    expect(disconnects).toEqual([]);
    clock.advance(100); // 500 ms of silence: dropped
    await waitFor(() => disconnects.length >= 1, { what: 'the link to be dropped' });
    expect(disconnects[0]).toBe(500);
    // It redials by itself once its backoff (under a second the first time) has passed on its clock.
    expect(orchestrator.connections.length).toBe(1);
    clock.advance(1000);
    await waitFor(() => orchestrator.connections.length >= 2, { what: 'the agent to redial' });
  });

  it('keeps a quiet link whose orchestrator answers pings', async () => {
    const orchestrator = await silentOrchestrator({ answerPings: true });
    cleanup.push(() => orchestrator.close());
    const clock = new FakeClock(0);
    const { link: agentLink, disconnects } = await link(orchestrator.url, clock);
    // Fifteen heartbeats, well past staleAfterMs (400 ms), with pongs only: each is heard before the next tick.
    for (let tick = 1; tick <= 15; tick++) {
      clock.advance(100);
      await waitFor(() => orchestrator.pings() >= tick, { what: `ping ${tick}` });
      await orchestrator.roundTrip();
    }
    expect(agentLink.connected).toBe(true);
    expect(disconnects).toEqual([]);
    expect(orchestrator.connections).toHaveLength(1);
  });
});

/** A port that accepts connections and never answers: a host that went dark behind a firewall that drops nothing. */
async function blackhole(): Promise<{ url: string; accepted(): number; close(): Promise<void> }> {
  const sockets = new Set<Socket>();
  let accepted = 0;
  const server = createServer((socket) => {
    accepted++;
    sockets.add(socket);
    socket.on('error', () => {});
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    accepted: () => accepted,
    async close() {
      for (const socket of sockets) socket.destroy();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}

describe('the agent link with several orchestrators (real sockets)', () => {
  const cleanup: (() => Promise<void> | void)[] = [];
  afterEach(async () => {
    for (const step of cleanup.splice(0)) await step();
  });

  function dial(urls: string[], options: { handshakeTimeoutMs?: number; clock?: FakeClock } = {}): { link: AgentLink; logs: Record<string, unknown>[] } {
    const logs: Record<string, unknown>[] = [];
    const log = pino({ level: 'info' }, { write: (line: string) => logs.push(JSON.parse(line) as Record<string, unknown>) });
    const agentLink = new AgentLink({
      targets: urls.map((url) => ({ url, trust: new ServerTrust(url) })), grant: 'g', log, hello, ...options,
      onWelcome: () => {}, onMessage: () => {}, onRejected: () => {},
    });
    agentLink.start();
    cleanup.push(() => agentLink.close());
    return { link: agentLink, logs };
  }

  /**
   * Let the sockets work in real time while the link's own time (its backoff) moves only by `stepMs` per turn: the
   * fake clock says how long the link chose to wait, without the test waiting it.
   */
  async function drive(clock: FakeClock, done: () => boolean, { stepMs = 0, what = 'condition' } = {}): Promise<void> {
    for (let turn = 0; turn < 2000; turn++) {
      if (done()) return;
      clock.advance(stepMs);
      await new Promise((resolve) => setTimeout(resolve, 5));
    }
    throw new Error(`timed out waiting for ${what}`);
  }
  const redials = (logs: Record<string, unknown>[]): number[] => logs.filter((line) => line.msg === 'link down; redialling').map((line) => line.retryInMs as number);

  it('skips a dead URL and a standby (503 NOT_LEADER) without waiting a backoff between them, and links to the live one', async () => {
    const standby = await standbyStandin();
    cleanup.push(() => standby.close());
    const live = await silentOrchestrator({ answerPings: true });
    cleanup.push(() => live.close());
    // The free port is taken after the others listen: taken before, the kernel could hand it to one of them.
    const dead = `http://127.0.0.1:${await freePort()}`;
    const clock = new FakeClock(0);
    const { link: agentLink, logs } = dial([dead, standby.url, live.url], { clock });
    // The link's clock never moves past 0: it linked without waiting any time of its own.
    await drive(clock, () => agentLink.connected, { what: 'the link to the live orchestrator' });
    expect(clock.now()).toBe(0);
    expect(logs.filter((line) => line.msg === 'could not link to this orchestrator; trying the next').map((line) => [line.url, line.next]))
      .toEqual([[dead, standby.url], [standby.url, live.url]]);
    expect(redials(logs)).toEqual([]);
    expect(standby.upgrades()).toBe(1);
    expect(agentLink.target.url).toBe(live.url);
    expect(logs.find((line) => line.msg === 'linked to the orchestrator')).toMatchObject({ url: live.url });
    expect(logs.find((line) => line.msg === 'this orchestrator is a standby; not linking to it')).toMatchObject({ url: standby.url, status: 503 });
  });

  it('goes on to the next after a dial that times out (a host gone dark) or is closed before the welcome', async () => {
    const dark = await blackhole();
    cleanup.push(() => dark.close());
    // Upgrades, then closes on the hello without a welcome: an orchestrator that stops before taking the agent.
    const closing = new WebSocketServer({ host: '127.0.0.1', port: 0 });
    await once(closing, 'listening');
    closing.on('connection', (socket) => socket.once('message', () => socket.close(1013, 'try later')));
    cleanup.push(() => new Promise<void>((resolve) => closing.close(() => resolve())));
    const live = await silentOrchestrator({ answerPings: true });
    cleanup.push(() => live.close());
    const { link: agentLink } = dial([dark.url, `http://127.0.0.1:${(closing.address() as AddressInfo).port}`, live.url], { handshakeTimeoutMs: 300 });
    await waitFor(() => agentLink.connected, { timeoutMs: 5000, what: 'the link to the live orchestrator' });
    expect(dark.accepted()).toBe(1);
    expect(agentLink.target.url).toBe(live.url);
  });

  it('a link that drops redials the next orchestrator first; the backoff is waited once per round of them all', async () => {
    const first = await silentOrchestrator({ answerPings: true });
    const second = await silentOrchestrator({ answerPings: true });
    cleanup.push(() => second.close());
    const clock = new FakeClock(0);
    const { link: agentLink, logs } = dial([first.url, second.url], { clock });
    await drive(clock, () => agentLink.connected, { what: 'the first link' });
    expect(agentLink.target.url).toBe(first.url);
    await first.close(); // its connections terminated and the port closed: what a killed orchestrator leaves
    // The drop is the end of a round: one backoff (the first of a round, 200 ms or so with jitter), then the second.
    await drive(clock, () => redials(logs).length > 0, { what: 'the redial' });
    const [waitMs] = redials(logs) as [number];
    expect(waitMs).toBeGreaterThan(0);
    expect(waitMs).toBeLessThan(1000);
    clock.advance(waitMs + 1); // the log rounds the wait to a millisecond
    await drive(clock, () => second.connections.length === 1 && agentLink.connected, { what: 'the link to the second' });
    expect(clock.now()).toBe(waitMs + 1); // no second backoff: the next URL was dialled at once
    expect(agentLink.target.url).toBe(second.url);
    expect(redials(logs)).toHaveLength(1);
    expect(logs.filter((line) => line.msg === 'linked to the orchestrator').map((line) => line.url)).toEqual([first.url, second.url]);
  });

  it('with every orchestrator a standby, it tries each once per round, in turn, a round at least every second', async () => {
    const standbys = [await standbyStandin(), await standbyStandin()];
    for (const standby of standbys) cleanup.push(() => standby.close());
    const clock = new FakeClock(0);
    const { link: agentLink, logs } = dial(standbys.map((standby) => standby.url), { clock });
    // Seven rounds: the backoff alone (200 ms growing to 5 s) would be past a second by the fifth.
    await drive(clock, () => standbys[1]!.upgrades() >= 7, { stepMs: 50, what: 'seven rounds' });
    // Round robin: the first is never more than one dial ahead of the second, nor behind it.
    const [a, b] = standbys.map((standby) => standby.upgrades()) as [number, number];
    expect(a - b).toBeGreaterThanOrEqual(0);
    expect(a - b).toBeLessThanOrEqual(1);
    // A standby answered in every round, so no round waited more than STANDBY_ROUND_MS (1 s).
    expect(redials(logs).length).toBeGreaterThanOrEqual(6);
    expect(Math.max(...redials(logs))).toBeLessThanOrEqual(1000);
    expect(agentLink.connected).toBe(false);
  });
});
