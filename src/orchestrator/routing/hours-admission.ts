import { MeshError } from '../../protocol/index.js';
import type { HostSession } from './host.js';

/**
 * A job whose deadline comes before any host that could run it opens: refused at submit, rather than left to expire
 * in its queue. Only when every connected host of its classes is out of its hours (a host that is hot or yielded may
 * take work again at any moment, and with none connected there is nothing to judge by) and the earliest of their next
 * windows opens after the deadline. Returns, for a job that may wait, what it waits for (its `queued` event says it),
 * or null when some host may take it.
 */
export function refuseBeyondHours(hosts: Iterable<HostSession>, deadlineAt: number | null): string | null {
  let opens = Infinity;
  const closed: HostSession[] = [];
  for (const host of hosts) {
    if (host.away?.state !== 'off-hours') return null;
    closed.push(host);
    opens = Math.min(opens, host.away.until ?? Infinity);
  }
  if (closed.length === 0) return null;
  const detail = closed.map((host) => `${host.id}: ${host.away!.reason}`).join('; ');
  if (deadlineAt !== null && opens > deadlineAt) throw new MeshError('DEADLINE_UNREACHABLE', { deadline: new Date(deadlineAt).toISOString(), detail });
  return detail;
}

/** Whether any connected host is out of its hours now (a pass over the hosts, nothing allocated). */
export function anyOutOfHours(hosts: Iterable<HostSession>): boolean {
  for (const host of hosts) if (host.away?.state === 'off-hours') return true;
  return false;
}
