import { ROUTE_SKIP_REASONS, type RouteSkipReason, type RouteView } from '../../protocol/index.js';
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

/** What the router decided for one batch (or, for explain, would decide now). */
export interface RouteDecision {
  /** The host chosen, or null when none can take the job now. */
  host: HostSession | null;
  class: string | null;
  warmth: Warmth | null;
  skipped: Skip[];
  /**
   * With no host: `a free slot` when some host of its classes could run it once a slot frees,
   * `a host of its classes` when none can.
   */
  waitingFor: 'a free slot' | 'a host of its classes' | null;
}

const REASON_INDEX = new Map<RouteSkipReason, number>(ROUTE_SKIP_REASONS.map((reason, index) => [reason, index]));

/**
 * The decision as the job row and the attempt keep it: a small JSON array,
 * `[host, class, warmth, [skippedHost, reason, …]]`, with warmth and reasons
 * as indexes into fixed lists (reasons are only ever appended, so old logs
 * still read). One string per batch, shared by its jobs; the router has
 * already computed everything in it.
 */
export function encodeRoute(decision: RouteDecision): string {
  const skipped: (string | number)[] = [];
  for (const skip of decision.skipped) skipped.push(skip.host, REASON_INDEX.get(skip.reason)!);
  return JSON.stringify([decision.host?.id ?? null, decision.class, decision.warmth === null ? null : WARMTHS.indexOf(decision.warmth), skipped]);
}

/** The stored form read back for the API; null for a missing or unreadable one. */
export function decodeRoute(text: string | null): RouteView | null {
  if (!text) return null;
  try {
    const [host, klass, warmth, skipped] = JSON.parse(text) as [string | null, string | null, number | null, (string | number)[]];
    const view: RouteView = { host, class: klass, warmth: warmth === null ? null : WARMTHS[warmth] ?? null, skipped: [] };
    for (let i = 0; i + 1 < skipped.length; i += 2) {
      const reason = ROUTE_SKIP_REASONS[Number(skipped[i + 1])];
      if (reason) view.skipped.push({ host: String(skipped[i]), reason });
    }
    return view;
  } catch {
    return null;
  }
}
