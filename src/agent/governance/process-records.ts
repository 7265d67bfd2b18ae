import { mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Logger } from 'pino';
import { ownIdentity, startedAt, stillRuns, type ProcessIdentity } from './process-identity.js';

/** One engine process an agent started, as it recorded it: the process, and the agent that started it. */
interface ProcessRecord {
  process: ProcessIdentity;
  name: string;
  agent: ProcessIdentity;
}

/**
 * What an agent records of each engine process it starts, so that the next agent of the same data folder can end
 * what a crashed one left behind: a file per process (`<folder>/<pid>.json`) naming the process and the agent for good
 * (pid and start time). An engine's tree dies with its agent where the platform sees to it (a Job Object, the portable
 * lifeline), but a cgroup outlives its agent, and an engine started by an older gpumesh may have outlived its own: at
 * start the agent ends every recorded process whose agent is gone and which still runs as recorded — never one that
 * merely holds a recycled pid, never a live agent's.
 */
export class ProcessRecords {
  readonly #dir: string;
  readonly #me = ownIdentity();

  constructor(dir: string) {
    this.#dir = dir;
  }

  record(pid: number, name: string): void {
    const started = startedAt(pid);
    if (started === null) return; // gone already: nothing to end later
    mkdirSync(this.#dir, { recursive: true });
    const record: ProcessRecord = { process: { pid, started }, name, agent: this.#me };
    writeFileSync(this.#file(pid), JSON.stringify(record));
  }

  forget(pid: number): void {
    rmSync(this.#file(pid), { force: true });
  }

  /** End the processes an agent that is gone left behind; returns what was ended. */
  reap(log: Logger): { pid: number; name: string }[] {
    let files: string[];
    try {
      files = readdirSync(this.#dir).filter((file) => file.endsWith('.json'));
    } catch {
      return [];
    }
    const ended: { pid: number; name: string }[] = [];
    for (const file of files) {
      let record: ProcessRecord;
      try {
        record = JSON.parse(readFileSync(join(this.#dir, file), 'utf8')) as ProcessRecord;
      } catch {
        rmSync(join(this.#dir, file), { force: true });
        continue;
      }
      // A live agent's process is its own (two agents on one folder are a mistake, but not this one's to punish).
      if (stillRuns(record.agent)) continue;
      if (stillRuns(record.process)) {
        end(record.process.pid);
        ended.push({ pid: record.process.pid, name: record.name });
      }
      rmSync(join(this.#dir, file), { force: true });
    }
    if (ended.length > 0) log.warn({ ended }, 'ended engine processes a previous agent of this data folder left behind');
    return ended;
  }

  #file(pid: number): string {
    return join(this.#dir, `${pid}.json`);
  }
}

/** End a leftover engine process and, where it led one, its process group (on Windows, Node's kill terminates it). */
function end(pid: number): void {
  if (process.platform !== 'win32') {
    try {
      process.kill(-pid, 'SIGKILL');
    } catch {
      // not a group leader any more, or gone
    }
  }
  try {
    process.kill(pid, 'SIGKILL');
  } catch {
    // gone
  }
}
