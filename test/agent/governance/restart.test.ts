import { afterAll, describe, expect, it } from 'vitest';
import {
  RestartingServer, restartDelay, RestartPolicy, startServer, type ExitReason, type ManagedServer, type ServerSettingsInput,
} from '../../../src/agent/governance/index.js';
import { FakeClock } from '../../helpers/fake-clock.js';
import { cgroupGovernor, expectNothingLeft, fixture, silentLog } from './helpers.js';

const { governor } = await cgroupGovernor('restart-test');
afterAll(() => governor.close());

// A server that dies at start, as a shell one-liner: real processes, without a node start-up each.
const CRASH_ON_START = `sh -c 'echo "fatal: the model file is corrupt" >&2; exit 3'`;
const settings = (command: string): ServerSettingsInput => ({ command, readiness: { http: '/health', timeoutMs: 30_000, intervalMs: 50 }, stopGraceMs: 1000 });

/** A keeper on a fake clock (restart delays advance only when the test says), starting real processes. */
function keeper(commands: string[], policy: Partial<RestartPolicy>) {
  const clock = new FakeClock();
  const exits: { reason: ExitReason; restartInMs: number | null }[] = [];
  let waiting: (() => void) | null = null;
  const launched: ManagedServer[] = [];
  const server = new RestartingServer({
    name: 'fixture', clock, log: silentLog, policy: RestartPolicy.parse(policy),
    launch: async () => {
      const started = await startServer(governor, { name: 'fixture', settings: settings(commands[Math.min(launched.length, commands.length - 1)]!) }, silentLog);
      launched.push(started);
      return started;
    },
    onExit: (reason, restartInMs) => {
      exits.push({ reason, restartInMs });
      waiting?.();
    },
  });
  const exitCount = (count: number) => new Promise<void>((resolve) => {
    const check = () => (exits.length >= count ? resolve() : (waiting = check));
    check();
  });
  return { clock, exits, launched, server, exitCount };
}

describe('restart with backoff', () => {
  it('delays grow exponentially from the initial delay and stop at the cap', () => {
    const policy = RestartPolicy.parse({ initialDelayMs: 100, factor: 2, maxDelayMs: 1000 });
    expect([1, 2, 3, 4, 5, 6].map((failures) => restartDelay(policy, failures))).toEqual([100, 200, 400, 800, 1000, 1000]);
    expect(RestartPolicy.parse({})).toEqual({ initialDelayMs: 1000, factor: 2, maxDelayMs: 60_000, stableAfterMs: 60_000, maxConsecutiveFailures: 5 });
  });

  it('a server that keeps crashing is restarted after 1×, 2× the delay, then given up on; callers get the crash', async () => {
    const { clock, exits, launched, server, exitCount } = keeper([CRASH_ON_START], { initialDelayMs: 1000, factor: 2, maxConsecutiveFailures: 3 });
    const ready = server.ready();
    ready.catch(() => {});
    await exitCount(1);
    expect(exits[0]!.restartInMs).toBe(1000);
    expect(exits[0]!.reason).toMatchObject({ kind: 'exited', code: 3 });
    clock.advance(999);
    expect(launched).toHaveLength(1); // not before its time
    clock.advance(1);
    await exitCount(2);
    expect(exits[1]!.restartInMs).toBe(2000);
    clock.advance(2000);
    await exitCount(3);
    expect(exits[2]!.restartInMs).toBeNull();
    await expect(ready).rejects.toMatchObject({ code: 'ENGINE_CRASHED', message: expect.stringMatching(/exited with code 3.*gave up after 3 failures in a row/) });
    expect(server.restarts).toBe(2);
    expect(launched).toHaveLength(3);
    for (const started of launched) await expectNothingLeft(started.pid, started.cgroupPaths);
  });

  it('a run that lasted stableAfterMs resets the backoff; a recovered server is handed to callers; stop ends it for good', async () => {
    const { clock, exits, launched, server, exitCount } = keeper(
      [CRASH_ON_START, `${fixture('crash-after')} --port \${PORT}`, `${fixture('healthy-server')} --port \${PORT}`],
      { initialDelayMs: 1000, factor: 2, stableAfterMs: 10_000 },
    );
    const first = server.ready();
    await exitCount(1);
    expect(exits[0]!.restartInMs).toBe(1000);
    clock.advance(1000);
    const recovered = await first;
    expect(recovered).toBe(launched[1]);
    expect((await fetch(`${recovered.url}/health`)).ok).toBe(true);
    clock.advance(10_000); // it stays up longer than stableAfterMs (on the fake clock) before it dies
    await fetch(`${recovered.url}/crash`).catch(() => {});
    await exitCount(2);
    expect(exits[1]!.reason).toMatchObject({ kind: 'exited', code: 4 });
    expect(exits[1]!.restartInMs).toBe(1000); // not 2000: the stable run reset the count
    expect(server.consecutiveFailures).toBe(1);
    clock.advance(1000);
    const third = await server.ready();
    expect(third).toBe(launched[2]);
    await server.stop();
    expect(third.exitReason?.kind).toBe('stopped');
    clock.advance(60_000);
    expect(launched).toHaveLength(3);
    expect(exits).toHaveLength(2);
    for (const started of launched) await expectNothingLeft(started.pid, started.cgroupPaths);
  });
});
