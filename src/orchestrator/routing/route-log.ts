import type { RouteView } from '../../protocol/api/index.js';
import { ROUTE_SKIP_REASONS, type RouteSkipReason } from '../../protocol/index.js';
import type { HostSession } from './host.js';

export type Warmth = 'resident' | 'cached' | 'cold';
const WARMTHS: readonly Warmth[] = ['resident', 'cached', 'cold'];

/** One host passed over by a decision, and why. */
export interface Skip {
  host: string;
  /** The job's class the host was considered for (null when it serves none of them). */
  class: string | null;
  reason: RouteSkipReason;
}

/** Hosts a decision names at most; the rest it passed over are counted by reason. */
export const NAMED_SKIPS = 16;

/**
 * The hosts a decision passed over: the first NAMED_SKIPS by name, the rest as
 * a count per reason — with a thousand hosts, a log naming all of them would
 * cost more to build and store than the decision itself.
 */
export class SkipLog {
  readonly named: Skip[] = [];
  readonly unlisted: Partial<Record<RouteSkipReason, number>> = {};

  add(host: string, klass: string | null, reason: RouteSkipReason): void {
    if (this.named.length < NAMED_SKIPS) this.named.push({ host, class: klass, reason });
    else this.count(reason, 1);
  }

  /** Hosts passed over without being looked at one by one (not sampled, of no class of the job). */
  count(reason: RouteSkipReason, hosts: number): void {
    if (hosts > 0) this.unlisted[reason] = (this.unlisted[reason] ?? 0) + hosts;
  }
}

/** What the router decided for one batch (or, for explain, would decide now). */
export interface RouteDecision {
  /** The host chosen, or null when none can take the job now. */
  host: HostSession | null;
  class: string | null;
  warmth: Warmth | null;
  /** Hosts passed over by name (at most NAMED_SKIPS). */
  skipped: Skip[];
  /** The other hosts passed over, counted by reason. */
  unlisted: Partial<Record<RouteSkipReason, number>>;
  /**
   * With no host: `a free slot` when some host of its classes could run it once a slot frees,
   * `a host of its classes` when none can.
   */
  waitingFor: 'a free slot' | 'a host of its classes' | null;
}

const REASON_INDEX = new Map<RouteSkipReason, number>(ROUTE_SKIP_REASONS.map((reason, index) => [reason, index]));

/**
 * The decision as the job row and the attempt keep it: a small JSON array,
 * `[host, class, warmth, [skippedHost, reason, …], [reason, count, …]]`, with
 * warmth and reasons as indexes into fixed lists (reasons are only ever
 * appended, so old logs still read; logs from before the counts have four
 * elements). One string per batch, shared by its jobs; the router has
 * already computed everything in it.
 */
export function encodeRoute(decision: RouteDecision): string {
  const skipped: (string | number)[] = [];
  for (const skip of decision.skipped) skipped.push(skip.host, REASON_INDEX.get(skip.reason)!);
  const unlisted: number[] = [];
  for (const [reason, count] of Object.entries(decision.unlisted)) unlisted.push(REASON_INDEX.get(reason as RouteSkipReason)!, count);
  return JSON.stringify([decision.host?.id ?? null, decision.class, decision.warmth === null ? null : WARMTHS.indexOf(decision.warmth), skipped, unlisted]);
}

/** The stored form read back for the API; null for a missing or unreadable one. */
export function decodeRoute(text: string | null): RouteView | null {
  if (!text) return null;
  try {
    const [host, klass, warmth, skipped, unlisted = []] = JSON.parse(text) as [string | null, string | null, number | null, (string | number)[], number[]?];
    const view: RouteView = { host, class: klass, warmth: warmth === null ? null : WARMTHS[warmth] ?? null, skipped: [], unlisted: {} };
    for (let i = 0; i + 1 < skipped.length; i += 2) {
      const reason = ROUTE_SKIP_REASONS[Number(skipped[i + 1])];
      if (reason) view.skipped.push({ host: String(skipped[i]), reason });
    }
    for (let i = 0; i + 1 < unlisted.length; i += 2) {
      const reason = ROUTE_SKIP_REASONS[Number(unlisted[i])];
      if (reason) view.unlisted[reason] = Number(unlisted[i + 1]);
    }
    return view;
  } catch {
    return null;
  }
}
