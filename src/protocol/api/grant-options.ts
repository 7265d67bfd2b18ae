import { MeshError } from '../errors.js';

/**
 * Turn the CLI's and the HTTP API's grant options into caveat lines, so
 * `grant create` and `grant narrow` speak the same words.
 */
export interface GrantOptions {
  types?: string[];
  models?: string[];
  classes?: string[];
  /** Hosts its jobs may run on (agent grants: host ids it may join as). */
  hosts?: string[];
  albums?: string[];
  actions?: string[];
  host?: string;
  /** A duration such as `90s`, `10m`, `1h`, `7d`, or an ISO time. */
  expires?: string;
  maxPriority?: number;
  /** `N/s`, `N/m` or `N/h`. */
  rate?: string;
  /** The most jobs of its lineage queued at once (caveat `max-queued`). */
  maxQueued?: number;
  /** Device-seconds its lineage's jobs may compute per UTC day (caveat `device-seconds-per-day`). */
  deviceSecondsPerDay?: number;
  /** Where its jobs' ends are POSTed, signed (caveat `webhook`); a job may name no other callback URL. */
  webhook?: string;
}

const UNIT_MS: Record<string, number> = { s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 };

/** Parse `90s`, `10m`, `1h`, `7d` or an ISO time into an epoch-ms instant after `now`. */
export function parseExpiry(text: string, now: number): number {
  const match = /^(\d+(?:\.\d+)?)(s|m|h|d)$/.exec(text.trim());
  if (match) return now + Number(match[1]) * UNIT_MS[match[2]!]!;
  const at = Date.parse(text);
  if (!Number.isFinite(at)) throw new MeshError('VALIDATION_FAILED', { detail: `cannot read expiry "${text}": use 90s, 10m, 1h, 7d or an ISO time` });
  return at;
}

export function caveatsFromOptions(options: GrantOptions, now: number): string[] {
  const lines: string[] = [];
  const list = (condition: string, values: string[] | undefined): void => {
    if (values && values.length > 0) lines.push(`${condition} ${values.join(',')}`);
  };
  list('types', options.types);
  list('models', options.models);
  list('classes', options.classes);
  list('hosts', options.hosts);
  list('albums', options.albums);
  list('actions', options.actions);
  if (options.host) lines.push(`host ${options.host}`);
  if (options.expires) lines.push(`time-before ${new Date(parseExpiry(options.expires, now)).toISOString()}`);
  if (options.maxPriority !== undefined) lines.push(`max-priority ${options.maxPriority}`);
  if (options.rate) lines.push(`rate ${options.rate}`);
  if (options.maxQueued !== undefined) lines.push(`max-queued ${options.maxQueued}`);
  if (options.deviceSecondsPerDay !== undefined) lines.push(`device-seconds-per-day ${options.deviceSecondsPerDay}`);
  if (options.webhook) lines.push(`webhook ${options.webhook}`);
  return lines;
}

/**
 * What a gallery page needs and nothing more: submit images and clips and read them
 * back, in its albums, for a short time. Its grant travels in a link (and so
 * in browser history), so it cannot cancel, read mesh status or metrics, or
 * see other albums — their jobs, events or blobs.
 */
export const GALLERY_ACTIONS = ['jobs:submit', 'jobs:read', 'artifacts:read', 'blobs:read'];

/** The gallery grant in words, the same wherever it is described (README, `up`'s banner, `grant gallery --help`). */
export const GALLERY_GRANT_SUMMARY = 'may submit and view images and clips';

export function galleryGrantOptions(albums: readonly string[], expires: string): GrantOptions {
  return { actions: [...GALLERY_ACTIONS], types: ['image', 'video'], albums: [...albums], expires };
}

/**
 * What the mesh view (the dashboard at `/mesh`) needs and nothing more: read mesh status (`/v1/status`,
 * `/v1/hosts`, mesh events) and follow jobs (`/v1/events` needs `jobs:read`). It cannot submit, cancel, or read
 * artifacts or blobs — no pictures, only the mesh's state — and, like the gallery link, it expires.
 */
export const MESH_VIEW_ACTIONS = ['jobs:read', 'mesh:read'];

export function meshViewGrantOptions(expires: string): GrantOptions {
  return { actions: [...MESH_VIEW_ACTIONS], expires };
}

/** A duration such as `90s`, `10m`, `12h`, `7d` (not an instant). */
export const DURATION = /^\d+(s|m|h|d)$/;
