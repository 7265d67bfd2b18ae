import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, describe, expect, it } from 'vitest';
import type { Clock } from '../../../src/protocol/clock.js';
import { LogTail } from '../../../src/agent/governance/log-tail.js';
import { pollPauses, waitForHttp } from '../../../src/agent/governance/readiness.js';

/**
 * Readiness polling is adaptive: a started server is polled 5 ms after its first miss, then 10, 20 … up to the
 * configured interval, so a server that is ready quickly is seen quickly (no fixed sleep added to a cold start).
 */
describe('readiness polling', () => {
  it('pauses 5, 10, 20 … ms, doubling up to the interval and staying there', () => {
    const pauses = pollPauses(200);
    expect(Array.from({ length: 8 }, () => pauses.next())).toEqual([5, 10, 20, 40, 80, 160, 200, 200]);
    const short = pollPauses(3);
    expect([short.next(), short.next()]).toEqual([3, 3]);
  });

  // A real server that answers 503 until its fifth request; a clock that records each pause and ends it at once.
  let requests = 0;
  const server = createServer((_req, res) => {
    requests++;
    res.writeHead(requests >= 5 ? 200 : 503).end();
  });
  afterAll(() => new Promise<void>((resolve) => server.close(() => resolve())));

  it('polls a real server with those pauses until it answers 2xx', async () => {
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const { port } = server.address() as AddressInfo;
    const paused: number[] = [];
    const clock: Clock = {
      now: () => 0,
      setTimer(ms, fn) {
        paused.push(ms);
        const handle = setImmediate(fn);
        return { cancel: () => clearImmediate(handle) };
      },
    };
    await waitForHttp(new URL(`http://127.0.0.1:${port}/health`), { timeoutMs: 60_000, intervalMs: 200, clock, signal: new AbortController().signal });
    expect(requests).toBe(5);
    expect(paused).toEqual([5, 10, 20, 40]);
  });

  it('polls again as soon as the server prints a line, instead of sleeping out the pause', async () => {
    let answered = 0;
    let ready = false;
    const late = createServer((_req, res) => {
      answered++;
      res.writeHead(ready ? 200 : 503).end();
    });
    await new Promise<void>((resolve) => late.listen(0, '127.0.0.1', resolve));
    const { port } = late.address() as AddressInfo;
    const tail = new LogTail({ lines: 100, bytes: 65_536 });
    // Pauses that never end by themselves: only the server's output can move the check on.
    const clock: Clock = { now: () => 0, setTimer: () => ({ cancel: () => {} }) };
    const waiting = waitForHttp(new URL(`http://127.0.0.1:${port}/health`), { timeoutMs: 60_000, intervalMs: 200, clock, signal: new AbortController().signal, tail });
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect(answered).toBe(1);
    ready = true;
    tail.write('stdout', Buffer.from('server listening on port 1234\n'));
    await waiting;
    expect(answered).toBe(2);
    await new Promise<void>((resolve) => late.close(() => resolve()));
  });
});
