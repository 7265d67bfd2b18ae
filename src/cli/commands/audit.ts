import { Command } from 'commander';
import { clientFrom, type ClientOptions } from '../common/settings.js';
import { CliError, parseInteger, printJson, table } from '../common/output.js';
import { withClientOptions } from './shared.js';
import type { AuditView } from '../../protocol/api/index.js';
import { systemClock } from '../../protocol/clock.js';

/** An entry as `GET /v1/audit` answers it. */
type AuditEntry = AuditView;

interface AuditOptions extends ClientOptions {
  event?: string;
  actor?: string;
  grantId?: string;
  since?: string;
  limit: number;
  json?: boolean;
}

const UNIT_MS: Record<string, number> = { s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 };

/** `--since 2h` (that long ago) or an ISO time, as the ISO time the route takes. */
function sinceTime(text: string, now = systemClock.now()): string {
  const ago = /^(\d+)(s|m|h|d)$/.exec(text.trim());
  if (ago) return new Date(now - Number(ago[1]) * UNIT_MS[ago[2]!]!).toISOString();
  const at = Date.parse(text);
  if (Number.isNaN(at)) throw new CliError(`--since must be a duration such as 90m, 12h or 7d, or a time such as 2025-01-31T12:00:00Z, not "${text}"`);
  return new Date(at).toISOString();
}

/** The entries, newest first, page after page until `limit` are read or the log ends. */
async function read(options: AuditOptions): Promise<AuditEntry[]> {
  const client = clientFrom(options);
  const entries: AuditEntry[] = [];
  let cursor: string | null = null;
  do {
    const query = new URLSearchParams({ limit: String(Math.min(500, options.limit - entries.length)) });
    if (options.event) query.set('event', options.event);
    if (options.actor) query.set('actor', options.actor);
    if (options.grantId) query.set('grant', options.grantId);
    if (options.since) query.set('since', sinceTime(options.since));
    if (cursor) query.set('cursor', cursor);
    const page: { entries: AuditEntry[]; nextCursor: string | null } = await client.request('GET', `/v1/audit?${query}`);
    entries.push(...page.entries);
    cursor = page.nextCursor;
  } while (cursor && entries.length < options.limit);
  return entries;
}

export function auditCommand(): Command {
  return withClientOptions(new Command('audit'))
    .description('Show the audit log, newest first: grants minted and revoked, requests refused for their grant, admin actions (needs an admin grant)')
    .option('--event <event>', 'only this event: grant:minted, grant:revoked, request:refused or admin:action')
    .option('--actor <grant id>', 'only what this grant did (minted, revoked, read)')
    .option('--grant-id <grant id>', 'only entries about this grant (minted, revoked, or presented with a refused request)')
    .option('--since <when>', 'only entries since then: a duration ago (90m, 12h, 7d) or a time (2025-01-31T12:00:00Z)')
    .option('--limit <n>', 'at most this many entries', parseInteger('--limit'), 50)
    .option('--json', 'print JSON')
    .action(async (options: AuditOptions) => {
      if (options.limit < 1) throw new CliError('--limit must be at least 1');
      const entries = await read(options);
      if (options.json) return printJson({ entries });
      if (entries.length === 0) return void process.stdout.write('no audit entries\n');
      process.stdout.write(`${table(['AT', 'EVENT', 'GRANT', 'ACTOR', 'ROUTE', 'CLIENT', 'CODE', 'DETAIL'], entries.map((entry) => [
        entry.at.replace('T', ' ').slice(0, 19), entry.event, entry.grantId ?? '-', entry.actor ?? '-', entry.route ?? '-', entry.client ?? '-',
        entry.code ? `${entry.status ?? ''} ${entry.code}`.trim() : '-', entry.detail ?? '-',
      ]))}\n`);
    });
}
