import { Command } from 'commander';
import { caveatsFromOptions, inspectGrant, narrowGrant, type GrantOptions } from '../../orchestrator/auth/index.js';
import { clientFrom, type ClientOptions } from '../settings.js';
import { CliError, parseInteger, parseList, printJson } from '../output.js';
import { withClientOptions } from './shared.js';

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
    .option('--rate <N/unit>', 'jobs per s, m or h, e.g. 60/m');
}

export function grantCommand(): Command {
  const grant = new Command('grant').description('Mint, narrow and inspect grants (capability tokens)');
  withCaveatFlags(withClientOptions(grant.command('create')))
    .description('Mint a new grant (needs an admin grant). Client grants by default; --agent for an agent join grant')
    .option('--agent', 'an agent join grant (needs --host)')
    .option('--admin', 'an admin grant')
    .option('--host <id>', 'the host an agent grant is for')
    .option('--note <text>', 'a note kept with the grant')
    .option('--json', 'print JSON')
    .action(async (flags: CaveatFlags & ClientOptions & { agent?: boolean; admin?: boolean; note?: string; json?: boolean }) => {
      if (flags.agent && flags.admin) throw new CliError('choose one of --agent and --admin');
      if (flags.agent && !flags.host) throw new CliError('an agent grant needs --host <id>');
      const kind = flags.agent ? 'agent' : flags.admin ? 'admin' : 'client';
      const minted = await clientFrom(flags).request<{ id: string; token: string; caveats: string[] }>('POST', '/v1/grants', {
        kind, ...grantOptions(flags), note: flags.note,
      });
      if (flags.json) printJson(minted);
      else process.stdout.write(`${minted.token}\n`);
    });
  withCaveatFlags(grant.command('narrow <grant>'))
    .description('Add caveats to a grant, offline; the result can never do more than the original')
    .action((token: string, flags: CaveatFlags) => {
      let caveats: string[];
      try {
        caveats = caveatsFromOptions(grantOptions(flags), Date.now());
      } catch (error) {
        throw new CliError((error as Error).message);
      }
      if (caveats.length === 0) throw new CliError('say how to narrow it: --types, --models, --expires, …');
      process.stdout.write(`${narrowGrant(token.trim(), caveats)}\n`);
    });
  grant.command('inspect <grant>')
    .description('Show a grant\'s id and caveats (offline; does not check its signature)')
    .action((token: string) => printJson(inspectGrant(token.trim())));
  return grant;
}
