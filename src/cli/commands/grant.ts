import { Command } from 'commander';
import { caveatsFromOptions, DURATION, GALLERY_GRANT_SUMMARY, galleryGrantOptions, meshViewGrantOptions, type GrantOptions, type GrantPage, type GrantView, type Minted } from '../../protocol/api/index.js';
import { inspectGrant } from '../../protocol/grant-token.js';
import { pinsOfGrant } from '../../tls-client/index.js';
import type { MeshClient } from '../common/client.js';
import { installedJoinLine, joinLine } from '../common/join-line.js';
import { clientFrom, type ClientOptions } from '../common/settings.js';
import { CliError, parseInteger, parseList, printJson, table } from '../common/output.js';
import { withClientOptions } from './shared.js';
import { systemClock } from '../../protocol/clock.js';

interface CaveatFlags {
  types?: string;
  models?: string;
  classes?: string;
  hosts?: string;
  albums?: string;
  actions?: string;
  host?: string;
  expires?: string;
  maxPriority?: number;
  rate?: string;
  maxQueued?: number;
  deviceSecondsPerDay?: number;
  webhook?: string;
}

function grantOptions(flags: CaveatFlags): GrantOptions {
  return {
    types: flags.types ? parseList(flags.types) : undefined,
    models: flags.models ? parseList(flags.models) : undefined,
    classes: flags.classes ? parseList(flags.classes) : undefined,
    hosts: flags.hosts ? parseList(flags.hosts) : undefined,
    albums: flags.albums ? parseList(flags.albums) : undefined,
    actions: flags.actions ? parseList(flags.actions) : undefined,
    host: flags.host, expires: flags.expires, maxPriority: flags.maxPriority, rate: flags.rate,
    maxQueued: flags.maxQueued, deviceSecondsPerDay: flags.deviceSecondsPerDay, webhook: flags.webhook,
  };
}

function withCaveatFlags(command: Command): Command {
  return command
    .option('--types <list>', 'job types it allows, e.g. image,video')
    .option('--models <list>', 'models it allows')
    .option('--classes <list>', 'host classes its jobs may run on (agent grants: classes the host may serve)')
    .option('--hosts <list>', 'hosts its jobs may run on, e.g. laptop,desktop (agent grants: host ids it may join as)')
    .option('--albums <list>', 'gallery albums it may publish to and read')
    .option('--actions <list>', 'actions it allows, e.g. jobs:submit,jobs:read')
    .option('--expires <when>', 'a duration (90s, 10m, 1h, 7d) or an ISO time')
    .option('--max-priority <n>', 'the highest priority it may ask for (1 is highest)', parseInteger('--max-priority'))
    .option('--rate <N/unit>', 'jobs per s, m or h, e.g. 60/m')
    .option('--max-queued <n>', 'cap: the most jobs of its lineage (it and every grant narrowed from it) queued at once', parseInteger('--max-queued'))
    .option('--device-seconds-per-day <n>', 'cap: device-seconds its lineage\'s jobs may compute per UTC day', parseInteger('--device-seconds-per-day'))
    .option('--webhook <url>', 'POST its jobs\' ends here, signed; its jobs may name no other callback URL');
}

export function grantCommand(): Command {
  const grant = new Command('grant').description('Mint, narrow and inspect grants (capability tokens)');
  withCaveatFlags(withClientOptions(grant.command('create')))
    .description([
      'Mint a new grant (needs an admin grant). Client grants by default; --agent for an agent join grant.',
      'A TLS mesh adds the fingerprint of its CA (caveat tls-ca sha256:…), which agents and the CLI pin.',
      'Prints the grant alone on stdout; for --agent it also prints, on stderr, the one line that joins a host that',
      'has only Node (it installs the orchestrator\'s own package with npx and starts the agent):',
      '  node -e "<fetch, check the digest>" <url> <hex> && npx --yes --ignore-scripts ./gpumesh-<hex>.tgz agent --join <url> --grant <grant>',
      '(the package is fetched and kept only if its SHA-256 is <hex>; a TLS mesh\'s line also pins its CA),',
      'With --webhook <url> (a URL mesh.yaml\'s webhooks.allow allows), its jobs\' ends are POSTed there, signed: the secret',
      'to verify them with (whsec_…) is printed once, on stderr; give it to the receiver (POST /v1/webhooks/secret shows it again).',
      'and the line for a host where gpumesh is installed: gpumesh agent --join <url> --grant <grant>',
    ].join('\n'))
    .option('--agent', 'an agent join grant (needs --host)')
    .option('--join-url <url>', 'with --agent: the orchestrator URL the join line names (default: the URL this command reached it at)')
    .option('--admin', 'an admin grant')
    .option('--host <id>', 'the host an agent grant is for')
    .option('--note <text>', 'a note kept with the grant')
    .option('--json', 'print JSON')
    .action(async (flags: CaveatFlags & ClientOptions & { agent?: boolean; admin?: boolean; note?: string; json?: boolean; joinUrl?: string }) => {
      if (flags.agent && flags.admin) throw new CliError('choose one of --agent and --admin');
      if (flags.agent && !flags.host) throw new CliError('an agent grant needs --host <id>');
      const kind = flags.agent ? 'agent' : flags.admin ? 'admin' : 'client';
      const client = clientFrom(flags);
      const minted = await client.request<Minted>('POST', '/v1/grants', {
        kind, ...grantOptions(flags), note: flags.note,
      });
      if (!flags.agent) {
        if (flags.json) return printJson(minted);
        process.stdout.write(`${minted.token}\n`);
        // stdout stays the grant alone, for scripts.
        if (minted.webhook) process.stderr.write(`# its jobs' ends are POSTed to ${minted.webhook.url}, signed with this secret (Standard Webhooks); give it to the receiver:\n${minted.webhook.secret}\n`);
        return;
      }
      // The agent reads its host and classes from the grant, so the URL and the grant are all it needs.
      const url = flags.joinUrl ?? client.baseUrl;
      const served = await servedPackage(client);
      const installed = installedJoinLine({ url, grant: minted.token });
      const join = typeof served === 'string' ? joinLine({ url, grant: minted.token, sha256: served, tlsCa: pinsOfGrant(minted.token)[0]?.fingerprint ?? null }) : null;
      if (flags.json) return printJson({ ...minted, join: join ?? installed, joinInstalled: installed });
      // stdout stays the grant alone, for scripts; the join lines are for the person at the terminal.
      process.stdout.write(`${minted.token}\n`);
      if (typeof served === 'string') {
        process.stderr.write(`# join host ${flags.host} with (needs only Node; installs gpumesh from the orchestrator):\n${join}\n# or, where gpumesh is installed:\n${installed}\n`);
      } else {
        process.stderr.write(`# the orchestrator serves no package for hosts to install (${served.error}); install gpumesh on host ${flags.host}, then join with:\n${installed}\n`);
      }
    });
  withCaveatFlags(grant.command('narrow <grant>'))
    .description('Add caveats to a grant, offline; the result can never do more than the original')
    .action(async (token: string, flags: CaveatFlags) => {
      let caveats: string[];
      try {
        caveats = caveatsFromOptions(grantOptions(flags), systemClock.now());
      } catch (error) {
        throw new CliError((error as Error).message);
      }
      if (caveats.length === 0) throw new CliError('say how to narrow it: --types, --models, --expires, …');
      // The caveat language and its checks are the orchestrator's: loaded for this command alone.
      const { narrowGrant } = await import('../../orchestrator/index.js');
      process.stdout.write(`${narrowGrant(token.trim(), caveats)}\n`);
    });
  grant.command('inspect <grant>')
    .description('Show a grant\'s id and caveats, including the TLS CA it pins (offline; does not check its signature)')
    .action((token: string) => printJson(inspectGrant(token.trim())));
  withClientOptions(grant.command('list'))
    .description('List the grants this mesh minted, newest first: id, kind, created, revoked, note (needs an admin grant)')
    .option('--limit <n>', 'at most this many', parseInteger('--limit'), 100)
    .option('--json', 'print JSON')
    .action(async (flags: ClientOptions & { limit: number; json?: boolean }) => {
      const page = await clientFrom(flags).request<GrantPage>('GET', `/v1/grants?limit=${flags.limit}`);
      if (flags.json) return printJson(page.grants);
      const rows = page.grants.map((view) => [view.id, view.kind, view.createdAt, view.revokedAt ?? '-', view.note ?? '']);
      process.stdout.write(`${table(['ID', 'KIND', 'CREATED', 'REVOKED', 'NOTE'], rows)}\n`);
    });
  withClientOptions(grant.command('show <id-or-grant>'))
    .description('Show a recorded grant: kind, caveats, note, and its caps with what its lineage uses of them now (needs an admin grant). Takes the id or the grant itself')
    .option('--json', 'print JSON')
    .action(async (target: string, flags: ClientOptions & { json?: boolean }) => {
      const view = await clientFrom(flags).request<GrantView>('GET', `/v1/grants/${encodeURIComponent(idOf(target.trim()))}`);
      if (flags.json) return printJson(view);
      process.stdout.write(`${showGrant(view)}\n`);
    });
  withClientOptions(grant.command('revoke <id-or-grant>'))
    .description('Revoke a grant and every grant narrowed from it, at once: requests, event streams and agent links using it are refused or closed (needs an admin grant). Takes the id (see `grant list`) or the grant itself')
    .option('--json', 'print JSON')
    .action(async (target: string, flags: ClientOptions & { json?: boolean }) => {
      const id = idOf(target.trim());
      const revoked = await clientFrom(flags).request<GrantView>('DELETE', `/v1/grants/${encodeURIComponent(id)}`);
      if (flags.json) printJson(revoked);
      else process.stdout.write(`revoked ${revoked.id} (${revoked.kind}${revoked.note ? `, ${revoked.note}` : ''}) at ${revoked.revokedAt}\n`);
    });
  withClientOptions(grant.command('gallery'))
    .description(`Mint a gallery grant and print the gallery link: it ${GALLERY_GRANT_SUMMARY} in its albums, nothing else, and expires soon (needs an admin grant)`)
    .option('--albums <list>', 'albums the page may submit to and view', 'default')
    .option('--expires <duration>', 'how long the link works: 90m, 12h, 7d', '12h')
    .action(async (flags: ClientOptions & { albums: string; expires: string }) => {
      if (!DURATION.test(flags.expires)) throw new CliError(`--expires must be a duration such as 90m, 12h or 7d, not "${flags.expires}"`);
      const client = clientFrom(flags);
      const minted = await client.request<Minted>('POST', '/v1/grants', {
        kind: 'client', ...galleryGrantOptions(parseList(flags.albums), flags.expires), note: 'gallery page',
      });
      process.stdout.write(`${client.baseUrl}/#grant=${minted.token}\n`);
    });
  withClientOptions(grant.command('mesh'))
    .description('Mint a mesh-view grant and print the link to the mesh dashboard (/mesh): it may only read mesh status and follow jobs, and expires soon (needs an admin grant)')
    .option('--expires <duration>', 'how long the link works: 90m, 12h, 7d', '12h')
    .action(async (flags: ClientOptions & { expires: string }) => {
      if (!DURATION.test(flags.expires)) throw new CliError(`--expires must be a duration such as 90m, 12h or 7d, not "${flags.expires}"`);
      const client = clientFrom(flags);
      const minted = await client.request<Minted>('POST', '/v1/grants', { kind: 'client', ...meshViewGrantOptions(flags.expires), note: 'mesh view' });
      process.stdout.write(`${client.baseUrl}/mesh#grant=${minted.token}\n`);
    });
  return grant;
}

/**
 * The hex SHA-256 of the package the orchestrator serves to joining hosts, or why it serves none (an older
 * orchestrator, or one where `npm pack` failed): then no line that installs from it would work.
 */
async function servedPackage(client: MeshClient): Promise<string | { error: string }> {
  try {
    const served = await client.request<{ sha256: string }>('GET', '/install');
    return served.sha256.replace(/^sha256:/, '');
  } catch (error) {
    return { error: (error as Error).message };
  }
}

/** A grant in words: what it is, its caveats, and each cap with its use now. */
export function showGrant(view: GrantView): string {
  const lines = [
    `grant    ${view.id} (${view.kind})${view.note ? ` — ${view.note}` : ''}`,
    `created  ${view.createdAt}${view.revokedAt ? `, revoked ${view.revokedAt}` : ''}`,
    `caveats  ${(view.caveats ?? []).join('; ') || '(none)'}`,
  ];
  const { maxQueued, deviceSecondsPerDay } = view.caps;
  if (maxQueued) lines.push(`queued   ${maxQueued.used} of ${maxQueued.limit} at once (${maxQueued.left} left)`);
  if (deviceSecondsPerDay) {
    lines.push(`device   ${deviceSecondsPerDay.used} of ${deviceSecondsPerDay.limit} s today (${deviceSecondsPerDay.left} left; refills ${deviceSecondsPerDay.refillsAt})`);
  }
  if (!maxQueued && !deviceSecondsPerDay) lines.push('caps     none');
  return lines.join('\n');
}

/** A grant id as given, or the id inside a grant. */
function idOf(target: string): string {
  if (/^[A-Za-z0-9_-]{1,64}$/.test(target) && target.length <= 32) return target;
  try {
    return inspectGrant(target).id;
  } catch {
    throw new CliError('give a grant id (see `gpumesh grant list`) or a grant');
  }
}
