import { isFingerprint } from '../../tls-client/fingerprint.js';
import { familyOf } from '../../protocol/models.js';

/**
 * The caveat language of gpumesh grants. A caveat is one line, `<condition> <argument>`,
 * in the style of the macaroon bakery's first-party checkers. Every caveat on a
 * grant must hold (they are conjunctive), which is why adding caveats can only narrow.
 */
export const GRANT_KINDS = ['admin', 'client', 'agent'] as const;
export type GrantKind = (typeof GRANT_KINDS)[number];

export const ACTIONS = [
  'jobs:submit', 'jobs:read', 'jobs:cancel', 'artifacts:read', 'blobs:read', 'blobs:write', 'mesh:read',
  'grants:create', 'grants:read', 'grants:revoke', 'audit:read', 'agent:join', 'hosts:drain', 'models:write',
  // Deleting a job's published results from the gallery (DELETE /v1/jobs/:id/artifacts), within the grant's albums.
  'artifacts:delete',
] as const;
export type Action = (typeof ACTIONS)[number];

/** What each kind of grant may do at most. Only admin grants may mint, list or revoke grants and read the audit log. */
export const KIND_ACTIONS: Record<GrantKind, ReadonlySet<Action>> = {
  admin: new Set(ACTIONS),
  client: new Set(['jobs:submit', 'jobs:read', 'jobs:cancel', 'artifacts:read', 'artifacts:delete', 'blobs:read', 'blobs:write', 'mesh:read']),
  agent: new Set(['agent:join', 'blobs:read']),
};

/** Actions that only read: the only ones a grant carried in a URL (`?access_token=`) may be used for. */
export const READ_ACTIONS: ReadonlySet<Action> = new Set(['jobs:read', 'artifacts:read', 'blobs:read']);

/** A rate caveat's unit and the length of its sliding window. */
export const RATE_UNITS = { s: 1000, m: 60_000, h: 3_600_000 } as const;
export type RateUnit = keyof typeof RATE_UNITS;
/** The most jobs one rate caveat may name: each admitted job is remembered until it leaves the window. */
const MAX_RATE_COUNT = 100_000;
/** The most a `max-queued` caveat may name: a mesh's queues hold 10,000 jobs by default (`queues.maxTotal`). */
const MAX_QUEUED_CAP = 1_000_000;
/** A day's seconds: a `device-seconds-per-day` cap above it (per device) is still meaningful on a mesh of many devices. */
const MAX_DEVICE_SECONDS = 100_000_000;

/** Caps: caveats that bound what a grant's lineage may use, counted by the orchestrator (`scheduler/caps.ts`). */
export const CAP_CONDITIONS = ['max-queued', 'device-seconds-per-day'] as const;
export type CapCondition = (typeof CAP_CONDITIONS)[number];

export type Caveat =
  | { condition: 'kind'; value: GrantKind }
  | { condition: 'actions' | 'types' | 'models' | 'classes' | 'hosts' | 'albums'; values: string[] }
  | { condition: 'host'; value: string }
  | { condition: 'time-before'; at: number }
  | { condition: 'max-priority'; level: number }
  /** At most `count` jobs in any sliding window of `windowMs` (one `unit`). */
  | { condition: 'rate'; count: number; unit: RateUnit; windowMs: number }
  | { condition: 'tls-ca'; fingerprint: string }
  /** A cap: at most `limit` jobs of the lineage queued at once, or device-seconds of compute per UTC day. */
  | { condition: CapCondition; limit: number }
  /** The grant's jobs call this URL back when they end; a job may name no other. */
  | { condition: 'webhook'; url: string };

const LIST_CONDITIONS = new Set(['actions', 'types', 'models', 'classes', 'hosts', 'albums']);

/** Every caveat condition gpumesh knows. */
export const CONDITIONS = [
  'kind', 'actions', 'types', 'models', 'classes', 'hosts', 'albums', 'host', 'time-before', 'max-priority', 'rate', 'tls-ca', ...CAP_CONDITIONS,
  'webhook',
] as const satisfies readonly Caveat['condition'][];
export type Condition = (typeof CONDITIONS)[number];

/**
 * The conditions that govern something a grant of each kind may do; a caveat outside its kind's set would restrict
 * nothing (`albums` on an agent grant: an agent never submits or reads jobs), so it is refused when minted and a
 * grant narrowed with one offline is not valid — a holder who narrowed a grant must never believe it narrower than
 * it is. `test/integration/caveats.test.ts` holds every condition in each set to a request it refuses.
 *
 * - Every kind: `kind`, `actions`, `time-before`; `tls-ca` (a word to the holder: the CA to pin before sending it).
 * - Jobs (client and admin grants): `types`, `models`, `albums` (submit, read, cancel, listings, events, blobs),
 *   `classes` and `hosts` (where its jobs may run), `max-priority`, `rate`, and the caps `max-queued` and
 *   `device-seconds-per-day`, and `webhook` (where its jobs' ends are POSTed; a job may name no other URL).
 * - Joining as an agent (agent and admin grants): `host` and `hosts` (the host ids it may join as), `classes` (what
 *   the host may serve), `models` (the models the host is sent — routing, loads, manifests — may report, and may
 *   pull).
 */
export const CONDITIONS_BY_KIND: Record<GrantKind, ReadonlySet<Condition>> = {
  admin: new Set(CONDITIONS),
  client: new Set(['kind', 'actions', 'time-before', 'tls-ca', 'types', 'models', 'albums', 'classes', 'hosts', 'max-priority', 'rate', ...CAP_CONDITIONS, 'webhook']),
  agent: new Set(['kind', 'actions', 'time-before', 'tls-ca', 'host', 'hosts', 'classes', 'models']),
};

/**
 * Why these caveats cannot all mean something on one grant, or null. A grant may carry several `kind` caveats (a
 * narrowing may add one): a condition must govern something under every one of them.
 */
export function scopeProblem(caveats: readonly Caveat[]): string | null {
  const kinds = caveats.flatMap((caveat) => (caveat.condition === 'kind' ? [caveat.value] : []));
  for (const caveat of caveats) {
    const kind = kinds.find((kind) => !CONDITIONS_BY_KIND[kind].has(caveat.condition));
    if (kind) {
      return `caveat "${formatCaveat(caveat)}" would restrict nothing on ${kind === 'admin' ? 'an' : 'a'} ${kind} grant (its conditions: ${[...CONDITIONS_BY_KIND[kind]].join(', ')})`;
    }
  }
  return capProblem(caveats) ?? webhookProblem(caveats);
}

/**
 * A grant's `webhook` names where its jobs' ends go; a narrowing that named another URL would send the parent's
 * notifications elsewhere (and, caveats being conjunctive, no job could satisfy both): refused when minted or
 * narrowed, and a grant narrowed so by hand is not valid. Naming the same URL again changes nothing and is allowed.
 */
function webhookProblem(caveats: readonly Caveat[]): string | null {
  let first: Extract<Caveat, { condition: 'webhook' }> | null = null;
  for (const caveat of caveats) {
    if (caveat.condition !== 'webhook') continue;
    if (first && caveat.url !== first.url) {
      return `caveat "${formatCaveat(caveat)}" differs from "${formatCaveat(first)}": a narrowed grant may not send its jobs' callbacks elsewhere`;
    }
    first ??= caveat;
  }
  return null;
}

/** The callback URL a grant's `webhook` caveat names (they all name the same one), or null. */
export function webhookOf(caveats: readonly Caveat[]): string | null {
  for (const caveat of caveats) if (caveat.condition === 'webhook') return caveat.url;
  return null;
}

/** The longest callback URL a grant or a job may name. */
export const MAX_WEBHOOK_URL = 2000;

/**
 * A callback URL in the one form it is kept and compared in (WHATWG's serialization), or why it cannot be one:
 * http(s) only, absolute, no credentials, no fragment, at most MAX_WEBHOOK_URL characters.
 */
export function normalizeWebhookUrl(text: string): string | { problem: string } {
  if (text.length > MAX_WEBHOOK_URL) return { problem: `is longer than ${MAX_WEBHOOK_URL} characters` };
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    return { problem: 'is not an absolute URL' };
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') return { problem: 'is not http:// or https://' };
  if (url.username || url.password) return { problem: 'carries credentials (user:password@)' };
  if (url.hash) return { problem: 'has a fragment (#…)' };
  if (/\s/.test(url.href)) return { problem: 'contains white space' };
  return url.href;
}

/**
 * A cap added after one of its kind must be tighter: every cap along the chain holds, so a looser one would restrict
 * nothing, and its holder would believe the grant allows more than it does. Refused when minted or narrowed, and a
 * grant narrowed so by hand is not valid.
 */
function capProblem(caveats: readonly Caveat[]): string | null {
  const tightest = new Map<CapCondition, Caveat & { limit: number }>();
  for (const caveat of caveats) {
    if (!isCap(caveat)) continue;
    const before = tightest.get(caveat.condition);
    if (before && caveat.limit >= before.limit) {
      return `caveat "${formatCaveat(caveat)}" does not tighten "${formatCaveat(before)}": a narrowed grant may only lower a cap`;
    }
    tightest.set(caveat.condition, caveat);
  }
  return null;
}

export function isCap(caveat: Caveat): caveat is Extract<Caveat, { condition: CapCondition }> {
  return (CAP_CONDITIONS as readonly string[]).includes(caveat.condition);
}
const NAME = /^[A-Za-z0-9][A-Za-z0-9._:-]{0,99}$/;

/** Parse one caveat line; returns an error string for text that is not a caveat we know. */
export function parseCaveat(text: string): Caveat | string {
  const space = text.indexOf(' ');
  const condition = space < 0 ? text : text.slice(0, space);
  const argument = space < 0 ? '' : text.slice(space + 1).trim();
  if (!argument) return `caveat "${text}" has no argument`;
  if (condition === 'kind') {
    return (GRANT_KINDS as readonly string[]).includes(argument) ? { condition, value: argument as GrantKind } : `unknown grant kind "${argument}"`;
  }
  if (LIST_CONDITIONS.has(condition)) {
    const values = argument.split(',').map((value) => value.trim()).filter(Boolean);
    if (values.length === 0 || !values.every((value) => NAME.test(value))) return `caveat "${text}" has a malformed list`;
    if (condition === 'actions' && !values.every((value) => (ACTIONS as readonly string[]).includes(value))) {
      return `caveat "${text}" names an unknown action`;
    }
    return { condition: condition as 'types', values };
  }
  if (condition === 'host') {
    return NAME.test(argument) ? { condition, value: argument } : `caveat "${text}" has a malformed name`;
  }
  if (condition === 'time-before') {
    const at = Date.parse(argument);
    return Number.isFinite(at) ? { condition, at } : `caveat "${text}" has a malformed time`;
  }
  if (condition === 'max-priority') {
    const level = Number(argument);
    return Number.isInteger(level) && level >= 1 ? { condition, level } : `caveat "${text}" has a malformed level`;
  }
  if (condition === 'rate') {
    const match = /^(\d+)\/(s|m|h)$/.exec(argument);
    if (!match) return `caveat "${text}" is not of the form N/s, N/m or N/h`;
    const count = Number(match[1]);
    if (count < 1 || count > MAX_RATE_COUNT) return `caveat "${text}" must allow 1 to ${MAX_RATE_COUNT} jobs per window`;
    const unit = match[2] as RateUnit;
    return { condition, count, unit, windowMs: RATE_UNITS[unit] };
  }
  if (condition === 'max-queued' || condition === 'device-seconds-per-day') {
    const limit = Number(argument);
    const most = condition === 'max-queued' ? MAX_QUEUED_CAP : MAX_DEVICE_SECONDS;
    // 0 is a cap too: a narrowing that may submit nothing more (max-queued 0) or use no device time (0 device-seconds).
    return /^\d+$/.test(argument) && limit <= most ? { condition, limit } : `caveat "${text}" must name a whole number from 0 to ${most}`;
  }
  if (condition === 'webhook') {
    const url = normalizeWebhookUrl(argument);
    return typeof url === 'string' ? { condition, url } : `caveat "${text}": the callback URL ${url.problem}`;
  }
  if (condition === 'tls-ca') {
    return isFingerprint(argument) ? { condition, fingerprint: argument } : `caveat "${text}" is not of the form sha256:<64 lowercase hex>`;
  }
  return `unknown caveat condition "${condition}"`;
}

export function formatCaveat(caveat: Caveat): string {
  switch (caveat.condition) {
    case 'kind': case 'host': return `${caveat.condition} ${caveat.value}`;
    case 'time-before': return `time-before ${new Date(caveat.at).toISOString()}`;
    case 'max-priority': return `max-priority ${caveat.level}`;
    case 'rate': return `rate ${caveat.count}/${caveat.unit}`;
    case 'tls-ca': return `tls-ca ${caveat.fingerprint}`;
    case 'webhook': return `webhook ${caveat.url}`;
    case 'max-queued': case 'device-seconds-per-day': return `${caveat.condition} ${caveat.limit}`;
    default: return `${caveat.condition} ${caveat.values.join(',')}`;
  }
}

/** What a request asks to do; each present field is checked by the caveats that concern it. */
export interface GrantRequest {
  action: Action;
  jobType?: string;
  model?: string;
  /** Classes the work would run on (agent join: all classes the agent claims). */
  classes?: readonly string[];
  /** The host the request is about (agent join: the host joining). Jobs name none at submit: routing applies `hosts`. */
  host?: string;
  priority?: number;
  album?: string;
  /** The callback URL a job names (normalized); absent: it names none. */
  webhook?: string;
}

/**
 * Check one caveat against a request. Returns null when it holds, else why not.
 * A condition about something the request does not name (a `types` caveat on
 * a blob read) does not apply. An agent's host is always named when it joins
 * (in its hello), so `host` binds where it matters.
 */
export function checkCaveat(caveat: Caveat, request: GrantRequest, now: number): string | null {
  const inList = (values: string[], value: string | undefined, what: string): string | null =>
    value === undefined || values.includes(value) ? null : `${what} "${value}" is not among ${values.join(', ')}`;
  switch (caveat.condition) {
    case 'kind':
      return KIND_ACTIONS[caveat.value].has(request.action) ? null : `a ${caveat.value} grant may not ${request.action}`;
    case 'actions':
      return caveat.values.includes(request.action) ? null : `action ${request.action} is not among ${caveat.values.join(', ')}`;
    case 'types': return inList(caveat.values, request.jobType, 'job type');
    // A model named allows every version of it (`ocr-det` allows `ocr-det@2`).
    case 'models': return inList(caveat.values, request.model === undefined ? undefined : familyOf(request.model), 'model');
    case 'albums': return inList(caveat.values, request.album, 'album');
    case 'classes': {
      if (!request.classes) return null;
      const outside = request.classes.filter((value) => !caveat.values.includes(value));
      if (request.action === 'agent:join') {
        return outside.length === 0 ? null : `classes ${outside.join(', ')} are not among ${caveat.values.join(', ')}`;
      }
      // A job may run on any of its type's classes; the grant must leave at least one.
      return request.classes.some((value) => caveat.values.includes(value))
        ? null : `none of the classes ${request.classes.join(', ')} is among ${caveat.values.join(', ')}`;
    }
    case 'host':
      return request.host === undefined || request.host === caveat.value ? null : `host "${request.host}" is not "${caveat.value}"`;
    case 'hosts':
      // Where a job may run is decided at routing, which passes over every host not listed ("host not granted").
      return inList(caveat.values, request.host, 'host');
    case 'time-before':
      return now < caveat.at ? null : `expired at ${new Date(caveat.at).toISOString()}`;
    case 'max-priority':
      return request.priority === undefined || request.priority >= caveat.level
        ? null : `priority ${request.priority} is above the ceiling ${caveat.level}`;
    case 'rate':
      return null; // enforced by the rate limiter, which needs state
    case 'max-queued':
    case 'device-seconds-per-day':
      return null; // enforced at admission against the lineage's use (scheduler/caps.ts), which needs state
    case 'webhook':
      // A job that names no URL is called back at the grant's; one that names another is refused.
      return request.webhook === undefined || request.webhook === caveat.url ? null : `callback URL ${request.webhook} is not ${caveat.url}`;
    case 'tls-ca':
      // Not a condition on the request but a word to the holder: the CA to pin before sending this grant.
      // Any request that reached us came through a connection the holder accepted, so it holds here.
      return null;
  }
}
