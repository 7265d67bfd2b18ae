import { MeshError } from '../../protocol/index.js';
import type { HostSession } from './host.js';

/**
 * A job whose deadline comes before any host that could run it opens: refused at submit, rather than left to expire
 * in its queue. Only when every connected host of its classes is out of its hours (a host that is hot or yielded may
 * take work again at any moment, and with none connected there is nothing to judge by) and the earliest of their next
 * windows opens after the deadline.
 */
export function refuseBeyondHours(hosts: Iterable<HostSession>, deadlineAt: number | null): void {
  if (deadlineAt === null) return;
  let opens = Infinity;
  const closed: HostSession[] = [];
  for (const host of hosts) {
    if (host.away?.state !== 'off-hours') return;
    closed.push(host);
    opens = Math.min(opens, host.away.until ?? Infinity);
  }
  if (closed.length === 0 || opens <= deadlineAt) return;
  throw new MeshError('DEADLINE_UNREACHABLE', {
    deadline: new Date(deadlineAt).toISOString(),
    detail: closed.map((host) => `${host.id}: ${host.away!.reason}`).join('; '),
  });
}
