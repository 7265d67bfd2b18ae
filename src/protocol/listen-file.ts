import { readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

/**
 * `<data>/listen.json`: where the orchestrator using a data folder listens. The orchestrator writes it when it
 * listens and removes it when it stops; the CLI on the same machine reads it to find the mesh of a data folder.
 */

/** The file in the data folder that says where the orchestrator using that folder listens. */
export const LISTEN_FILE = 'listen.json';

/** What `<data>/listen.json` holds: the URL, and the process that listens there (so a stale file is told apart). */
export interface ListenRecord {
  url: string;
  pid: number;
  startedAt: string;
}

/**
 * Record where the orchestrator listens, whatever port it got, so the CLI on this machine finds it from the data
 * folder alone (`--data`, `GPUMESH_HOME`). Renamed into place: a reader never sees it half written.
 */
export function writeListenFile(data: string, url: string): void {
  const path = join(data, LISTEN_FILE);
  const record: ListenRecord = { url, pid: process.pid, startedAt: new Date().toISOString() };
  writeFileSync(`${path}.${process.pid}.tmp`, `${JSON.stringify(record, null, 2)}\n`);
  renameSync(`${path}.${process.pid}.tmp`, path);
}

/** Remove the record at shutdown, if it is still this process's (another orchestrator may have taken the folder). */
export function removeListenFile(data: string): void {
  const record = readListenFile(data);
  if (record === null || record.pid === process.pid) rmSync(join(data, LISTEN_FILE), { force: true });
}

/** The record, or null when there is none or it is not one (a file from elsewhere is not trusted as a URL). */
export function readListenFile(data: string): ListenRecord | null {
  let parsed: unknown;
  try {
    parsed = JSON.parse(readFileSync(join(data, LISTEN_FILE), 'utf8'));
  } catch {
    return null;
  }
  const record = parsed as Partial<ListenRecord> | null;
  if (typeof record?.url !== 'string' || !/^https?:\/\//.test(record.url) || typeof record.pid !== 'number') return null;
  return { url: record.url, pid: record.pid, startedAt: typeof record.startedAt === 'string' ? record.startedAt : '' };
}

/** Whether the process that wrote the record still runs (one of another user's answers EPERM: it runs). */
export function listenerRuns(record: ListenRecord): boolean {
  try {
    return process.kill(record.pid, 0);
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}
