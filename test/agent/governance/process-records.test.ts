import { spawn, spawnSync } from 'node:child_process';
import { mkdirSync, readdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { startedAt } from '../../../src/agent/governance/process-identity.js';
import { ProcessRecords } from '../../../src/agent/governance/process-records.js';
import { tempDirsPerTest, waitFor } from '../../helpers/mesh.js';
import { capturingLog } from './helpers.js';

const tempDir = tempDirsPerTest();
const alive = (pid: number): boolean => {
  try {
    process.kill(pid, 0);
    return startedAt(pid) !== null;
  } catch {
    return false;
  }
};

/** A process that would run for a minute, leading a group of its own, as an engine does. */
function engine(): number {
  const child = spawn('sleep', ['60'], { detached: true, stdio: 'ignore' });
  child.unref();
  return child.pid!;
}

describe('what a crashed agent left behind', () => {
  it('the next agent of the folder ends the engines a dead agent recorded, and nothing else', async () => {
    const dir = tempDir();
    mkdirSync(dir, { recursive: true });
    const deadAgent = { pid: spawnSync('true').pid!, started: 'long ago' };
    const leftover = engine();
    const recycled = engine();
    const someoneElses = engine();
    const write = (pid: number, started: string, agent: { pid: number; started: string }): void =>
      writeFileSync(join(dir, `${pid}.json`), JSON.stringify({ process: { pid, started }, name: `engine-${pid}`, agent }));
    write(leftover, startedAt(leftover)!, deadAgent);
    // The pid a dead agent recorded, now held by a process started at another moment: a stranger, not a leftover.
    write(recycled, 'another moment', deadAgent);
    // A live agent's engine (this process stands in for it): not this agent's to end.
    write(someoneElses, startedAt(someoneElses)!, { pid: process.pid, started: startedAt(process.pid)! });

    const { log, lines } = capturingLog();
    const ended = new ProcessRecords(dir).reap(log);
    expect(ended).toEqual([{ pid: leftover, name: `engine-${leftover}` }]);
    await waitFor(() => !alive(leftover), { what: 'the leftover to end' });
    expect(alive(recycled)).toBe(true);
    expect(alive(someoneElses)).toBe(true);
    expect(lines.find((line) => line.msg === 'ended engine processes a previous agent of this data folder left behind')).toBeDefined();
    // The dead agent's records are gone; the live one's stays.
    expect(readdirSync(dir)).toEqual([`${someoneElses}.json`]);
    for (const pid of [recycled, someoneElses]) process.kill(pid, 'SIGKILL');
  });

  it('an agent records what it starts and forgets it when it ends', () => {
    const dir = tempDir();
    const records = new ProcessRecords(dir);
    const pid = engine();
    records.record(pid, 'sleeper');
    expect(readdirSync(dir)).toEqual([`${pid}.json`]);
    records.forget(pid);
    expect(readdirSync(dir)).toEqual([]);
    process.kill(pid, 'SIGKILL');
  });
});
