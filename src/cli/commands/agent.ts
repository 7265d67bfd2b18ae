import { existsSync } from 'node:fs';
import { hostname } from 'node:os';
import { join } from 'node:path';
import { Command, Option } from 'commander';
import type { DrainReport } from '../../agent/index.js';
import type { Draining } from '../../protocol/api/index.js';
import { inspectGrant } from '../../protocol/grant-token.js';
import { dataDir, dataDirHelp } from '../common/data-folder.js';
import { agentServiceCommand } from './agent-service.js';
import { clientFrom, explicitPin, resolveGrant, resolveUrls } from '../common/settings.js';
import { parseUrlList } from '../common/url-list.js';
import { CliError, parseInteger, parseList } from '../common/output.js';
import { every, systemClock } from '../../protocol/clock.js';

interface AgentFlags {
  join?: string;
  url?: string;
  grant?: string;
  grantFile?: string;
  host?: string;
  classes?: string;
  data?: string;
  cpuBudget?: number;
  concurrency: number;
  idleUnload: number;
  drainTimeout: number;
  cgroups: 'auto' | 'v2' | 'v1' | 'off';
  governance: 'auto' | 'portable';
  cgroupRoot?: string;
  tlsCaFingerprint?: string;
  engines?: string;
  engineLimit: Record<string, Record<string, number>>;
  engineUser?: string;
  config?: string;
}

const ENGINE_LIMIT_KEYS = ['memoryLimitMB', 'pidsLimit', 'cpuWeight'];

/** `--engine-limit sdcpp.memoryLimitMB=12000`, repeatable: the host's ceiling on one limit of one engine's servers. */
function engineLimit(text: string, limits: Record<string, Record<string, number>>): Record<string, Record<string, number>> {
  const match = /^([a-z0-9][a-z0-9_-]*)\.([A-Za-z]+)=(\d+)$/.exec(text);
  if (!match || !ENGINE_LIMIT_KEYS.includes(match[2]!)) {
    throw new CliError(`--engine-limit takes <engine>.<limit>=<number>, with limit one of ${ENGINE_LIMIT_KEYS.join(', ')} (e.g. sdcpp.memoryLimitMB=12000), not "${text}"`);
  }
  const [, engine, key, value] = match;
  return { ...limits, [engine!]: { ...limits[engine!], [key!]: Number(value) } };
}

interface DrainFlags {
  data?: string;
  host?: string;
  url?: string;
  grant?: string;
  grantFile?: string;
  tlsCaFingerprint?: string;
}

const DEFAULT_CLASSES = 'image,tensor';

/** The folder the agent keeps its model cache and control socket in. */
const agentData = (data: string | undefined): string => data ?? join(dataDir(), 'agent');

/**
 * What the join grant itself says about this host: its `host` caveat and the classes every `classes` caveat
 * allows, so `gpumesh agent --join <url> --grant <grant>` needs nothing else. Null where it says nothing
 * (or is not a grant: the orchestrator will say why).
 */
function grantDefaults(grant: string): { host: string | null; classes: string[] | null } {
  let caveats: string[];
  try {
    caveats = inspectGrant(grant).caveats;
  } catch {
    return { host: null, classes: null };
  }
  let host: string | null = null;
  let classes: string[] | null = null;
  for (const caveat of caveats) {
    const [condition, argument = ''] = caveat.split(' ', 2);
    if (condition === 'host') host = argument;
    if (condition === 'classes') {
      const allowed = parseList(argument);
      classes = classes ? classes.filter((name) => allowed.includes(name)) : allowed;
    }
  }
  return { host, classes };
}

export function agentCommand(): Command {
  const agent = new Command('agent')
    .description([
      'Run the agent of this host: dial the orchestrator and run its jobs on local devices.',
      'Join with the line `gpumesh grant create --agent` prints: gpumesh agent --join <url> --grant <grant>.',
      'Orchestrators sharing one store (one active, the others standing by) are joined with all their URLs, comma-separated: --join http://nas1:7070,http://nas2:7070; the agent links to whichever is active and goes on to the next when its link drops.',
      'SIGTERM (or Ctrl-C, or `gpumesh agent drain`) drains it: it finishes the work in flight, takes no more and exits 0; a second signal exits at once.',
    ].join('\n'))
    // Options after `drain` are the subcommand's own (it has --data and --host too).
    .enablePositionalOptions()
    .option('--join <urls>', 'the orchestrator to join, or several sharing one store, comma-separated (the same as --url)')
    .option('--url <urls>', 'orchestrator URL, https:// for a TLS mesh, or several comma-separated, tried in turn (env GPUMESH_URL; default http://127.0.0.1:7070)')
    .option('--grant <grant>', 'agent join grant (env GPUMESH_GRANT); a TLS mesh\'s grant names the CA the agent pins')
    .option('--grant-file <path>', 'read the grant from a file')
    .option('--host <id>', 'this host\'s id (default: the grant\'s host, else this machine\'s hostname)')
    .option('--classes <list>', `routing classes this host serves (default: the grant's classes, else ${DEFAULT_CLASSES})`)
    .option('--data <dir>', `model cache and control socket folder (default <data folder>/agent; data folder: ${dataDirHelp()})`)
    .option('--cpu-budget <MB>', 'memory for models on the CPU (default: half the RAM, at most 8192)', parseInteger('--cpu-budget'))
    .option('--concurrency <n>', 'batches computed at once (one whose outputs are still uploading does not count)', parseInteger('--concurrency'), 1)
    .option('--idle-unload <seconds>', 'unload a model idle this long unless the orchestrator holds it for its minReplicas; engine processes end with the last one', parseInteger('--idle-unload'), 300)
    .option('--drain-timeout <seconds>', 'when draining, how long to wait for the work in flight before leaving anyway (exit 1)', parseInteger('--drain-timeout'), 300)
    .addOption(new Option('--governance <mode>', 'how engine processes are governed: auto (cgroups on Linux, job objects on Windows, portable elsewhere) or portable (process groups with a lifeline, memory read by polling)')
      .choices(['auto', 'portable']).default('auto'))
    .addOption(new Option('--cgroups <mode>', 'limit engine processes with cgroups: auto (v2, else v1), v2, v1 or off (process groups only)')
      .choices(['auto', 'v2', 'v1', 'off']).default('auto'))
    .option('--cgroup-root <dir>', 'cgroup v2: a cgroup delegated to the agent, to create gpumesh/ in (default: the agent\'s own)')
    .option('--tls-ca-fingerprint <sha256>', 'pin this TLS CA when the grant names none (env GPUMESH_TLS_CA_FINGERPRINT)')
    .option('--engines <list>', 'the engines this host runs, comma-separated (default: every registered engine; the hello lists them)')
    .option('--config <file>', 'this host\'s own config (YAML): the models it runs with commands, servers and other settings only a host may give (default <data>/host.yaml when present)')
    .option('--engine-user <user>', 'run as root: the user engine processes run as (default nobody, who must be able to read the model cache in --data; root keeps them root)')
    .option('--engine-limit <engine.limit=n>', 'a ceiling for one engine\'s servers, e.g. sdcpp.memoryLimitMB=12000 (memoryLimitMB, pidsLimit, cpuWeight); repeatable',
      engineLimit, {})
    .action((flags: AgentFlags) => runAgent(flags));
  agent.command('drain')
    .summary('Drain the agent on this machine, or with --host any host through the orchestrator')
    .description([
      'Drain the agent running on this machine (through its control socket in --data): it finishes its work in flight, takes no more, leaves the mesh and exits; this command prints its progress until it has left.',
      'With --host, ask the orchestrator to drain that host instead (an admin grant; POST /v1/hosts/:id/drain).',
    ].join('\n'))
    .option('--data <dir>', `the agent's data folder, as given to \`gpumesh agent --data\` (default <data folder>/agent; data folder: ${dataDirHelp()})`)
    .option('--host <id>', 'drain this host through the orchestrator instead of the local agent')
    .option('--url <urls>', 'with --host: orchestrator URL, or several comma-separated, tried in turn (env GPUMESH_URL)')
    .option('--grant <grant>', 'with --host: an admin grant (env GPUMESH_GRANT; default: <GPUMESH_HOME>/admin.grant)')
    .option('--grant-file <path>', 'with --host: read the grant from a file')
    .option('--tls-ca-fingerprint <sha256>', 'with --host: pin this TLS CA when the grant names none (env GPUMESH_TLS_CA_FINGERPRINT)')
    .action((flags: DrainFlags) => drain(flags));
  agent.addCommand(agentServiceCommand());
  return agent;
}

async function runAgent(flags: AgentFlags): Promise<void> {
  const grant = (flags.grant ?? (flags.grantFile ? resolveGrant({ grantFile: flags.grantFile }) : process.env.GPUMESH_GRANT))?.trim();
  if (!grant) throw new CliError('the agent needs a join grant: --grant, --grant-file or GPUMESH_GRANT (mint one with `gpumesh grant create --agent --host <id>`)');
  const fromGrant = grantDefaults(grant);
  const pin = explicitPin(flags);
  const { Agent, ControlServer, ENGINE_NAMES, HostConfig, controlEndpoint } = await import('../../agent/index.js');
  const hostFile = flags.config ?? join(agentData(flags.data), 'host.yaml');
  const hostConfig = (() => {
    try {
      return flags.config !== undefined || existsSync(hostFile) ? HostConfig.load(hostFile) : HostConfig.none();
    } catch (error) {
      throw new CliError((error as Error).message);
    }
  })();
  const engines = flags.engines === undefined ? undefined : parseList(flags.engines);
  const unknown = engines?.filter((name) => !ENGINE_NAMES.includes(name)) ?? [];
  if (unknown.length > 0) throw new CliError(`--engines: unknown engine ${unknown.map((name) => `"${name}"`).join(', ')} (registered: ${ENGINE_NAMES.join(', ')})`);
  const { pino } = await import('pino');
  const log = pino({ level: process.env.GPUMESH_LOG_LEVEL ?? 'info' });
  let leaving: Promise<void> | null = null;
  const reports = new Set<(line: DrainReport) => void>();
  const agent = await Agent.create({
    log,
    url: flags.join === undefined ? resolveUrls(flags) : parseUrlList(flags.join, '--join'), grant, host: flags.host ?? fromGrant.host ?? hostname(),
    classes: flags.classes ? parseList(flags.classes) : fromGrant.classes ?? parseList(DEFAULT_CLASSES),
    dataDir: agentData(flags.data), cpuBudgetMB: flags.cpuBudget,
    concurrency: flags.concurrency, idleUnloadMs: flags.idleUnload * 1000, tlsCaFingerprint: pin?.fingerprint,
    governance: { mode: flags.governance, cgroups: flags.cgroups, cgroupRoot: flags.cgroupRoot ?? null, engines: flags.engineLimit },
    engines, hostConfig, ...(flags.engineUser ? { engineUser: flags.engineUser } : {}),
    onDrainRequested: () => void leave(),
  });
  const control = await ControlServer.listen(controlEndpoint(agentData(flags.data)), { drain: (report) => {
    reports.add(report);
    report({ state: 'draining', ...agent.work });
    void leave();
  } }, log).catch((error: unknown) => {
    // Without it only `gpumesh agent drain` is lost (SIGTERM still drains); a socket path too long is the usual cause.
    log.warn({ err: error }, 'no control socket; drain this agent with SIGTERM');
    return null;
  });

  /** Drain, leave and exit: 0 when everything in flight finished and was acknowledged, 1 when the drain timed out. */
  function leave(): Promise<void> {
    leaving ??= (async () => {
      let last = '';
      const stopProgress = every(systemClock, 200, () => {
        const now = JSON.stringify(agent.work);
        if (now === last) return;
        last = now;
        for (const report of reports) report({ state: 'draining', ...agent.work });
      });
      const drained = await agent.leave({ timeoutMs: flags.drainTimeout * 1000 });
      stopProgress();
      for (const report of reports) report({ state: 'left', drained });
      await control?.close();
      process.exit(drained ? 0 : 1);
    })();
    return leaving;
  }

  agent.start((reason) => {
    process.stderr.write(`gpumesh agent: ${reason}\n`);
    void agent.close().then(() => process.exit(2));
  });
  let signals = 0;
  const onSignal = (): void => {
    if (++signals > 1) process.exit(1);
    void leave();
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  // Started by `gpumesh up`: it stops this agent by closing the IPC channel, and so does its death; end at once.
  if (process.send) process.on('disconnect', () => void agent.close().then(() => process.exit(0)));
}

async function drain(flags: DrainFlags): Promise<void> {
  if (flags.host) {
    const answer = await clientFrom({ url: flags.url, grant: flags.grant, grantFile: flags.grantFile, tlsCaFingerprint: flags.tlsCaFingerprint }).request<Draining>('POST', `/v1/hosts/${encodeURIComponent(flags.host)}/drain`);
    process.stdout.write(`host ${answer.host} is draining (${answer.jobsInFlight} jobs in flight); its agent leaves once they are done\n`);
    return;
  }
  const { requestDrain, controlEndpoint } = await import('../../agent/index.js');
  const path = controlEndpoint(agentData(flags.data));
  let left;
  try {
    left = await requestDrain(path, (report) => {
      if (report.state === 'draining') process.stdout.write(`draining: ${report.batches} batches running, ${report.unacknowledged} results not yet acknowledged\n`);
    });
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === 'ENOENT' || code === 'ECONNREFUSED') throw new CliError(`no agent is running with data folder ${agentData(flags.data)} (no control socket at ${path})`);
    throw new CliError(`drain failed: ${(error as Error).message}`);
  }
  if (!left.drained) throw new CliError('the agent left before its work in flight was done (its drain timed out)');
  process.stdout.write('the agent finished its work in flight and left the mesh\n');
}
