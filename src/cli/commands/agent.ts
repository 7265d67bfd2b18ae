import { hostname } from 'node:os';
import { join } from 'node:path';
import { Command, Option } from 'commander';
import { dataDir, explicitPin, resolveGrant, resolveUrl } from '../settings.js';
import { CliError, parseInteger, parseList } from '../output.js';
import { onShutdown } from './serve.js';

interface AgentFlags {
  url?: string;
  grant?: string;
  grantFile?: string;
  host: string;
  classes: string;
  data?: string;
  cpuBudget?: number;
  concurrency: number;
  idleUnload: number;
  cgroups: 'auto' | 'v2' | 'v1' | 'off';
  cgroupRoot?: string;
  tlsCaFingerprint?: string;
  engines?: string;
  engineLimit: Record<string, Record<string, number>>;
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

export function agentCommand(): Command {
  return new Command('agent')
    .description('Run the agent of this host: dial the orchestrator and run its jobs on local devices')
    .option('--url <url>', 'orchestrator URL, https:// for a TLS mesh (env GPUMESH_URL; default http://127.0.0.1:7070)')
    .option('--grant <grant>', 'agent join grant (env GPUMESH_GRANT); a TLS mesh\'s grant names the CA the agent pins')
    .option('--grant-file <path>', 'read the grant from a file')
    .option('--host <id>', 'this host\'s id (must match the grant)', hostname())
    .option('--classes <list>', 'routing classes this host serves', 'image,tensor')
    .option('--data <dir>', 'model cache folder (default <GPUMESH_HOME or ./.gpumesh>/agent)')
    .option('--cpu-budget <MB>', 'memory for models on the CPU (default: half the RAM, at most 8192)', parseInteger('--cpu-budget'))
    .option('--concurrency <n>', 'batches run at once', parseInteger('--concurrency'), 1)
    .option('--idle-unload <seconds>', 'unload a model idle this long; engine processes end with the last one', parseInteger('--idle-unload'), 300)
    .addOption(new Option('--cgroups <mode>', 'limit engine processes with cgroups: auto (v2, else v1), v2, v1 or off (process groups only)')
      .choices(['auto', 'v2', 'v1', 'off']).default('auto'))
    .option('--cgroup-root <dir>', 'cgroup v2: a cgroup delegated to the agent, to create gpumesh/ in (default: the agent\'s own)')
    .option('--tls-ca-fingerprint <sha256>', 'pin this TLS CA when the grant names none (env GPUMESH_TLS_CA_FINGERPRINT)')
    .option('--engines <list>', 'the engines this host runs, comma-separated (default: every registered engine; the hello lists them)')
    .option('--engine-limit <engine.limit=n>', 'a ceiling for one engine\'s servers, e.g. sdcpp.memoryLimitMB=12000 (memoryLimitMB, pidsLimit, cpuWeight); repeatable',
      engineLimit, {})
    .action(async (flags: AgentFlags) => {
      const grant = flags.grant ?? (flags.grantFile ? resolveGrant({ grantFile: flags.grantFile }) : process.env.GPUMESH_GRANT);
      if (!grant) throw new CliError('the agent needs a join grant: --grant, --grant-file or GPUMESH_GRANT (mint one with `gpumesh grant create --agent --host <id>`)');
      const pin = explicitPin(flags);
      const { Agent, ENGINE_NAMES } = await import('../../agent/index.js');
      const engines = flags.engines === undefined ? undefined : parseList(flags.engines);
      const unknown = engines?.filter((name) => !ENGINE_NAMES.includes(name)) ?? [];
      if (unknown.length > 0) throw new CliError(`--engines: unknown engine ${unknown.map((name) => `"${name}"`).join(', ')} (registered: ${ENGINE_NAMES.join(', ')})`);
      const agent = await Agent.create({
        url: resolveUrl(flags), grant: grant.trim(), host: flags.host, classes: parseList(flags.classes),
        dataDir: flags.data ?? join(dataDir(), 'agent'), cpuBudgetMB: flags.cpuBudget,
        concurrency: flags.concurrency, idleUnloadMs: flags.idleUnload * 1000, tlsCaFingerprint: pin?.fingerprint,
        governance: { cgroups: flags.cgroups, cgroupRoot: flags.cgroupRoot ?? null, engines: flags.engineLimit },
        engines,
      });
      agent.start((reason) => {
        process.stderr.write(`gpumesh agent: ${reason}\n`);
        void agent.close().then(() => process.exit(2));
      });
      onShutdown(() => agent.close());
      // Started by `gpumesh up`: end with it.
      if (process.send) process.on('disconnect', () => void agent.close().then(() => process.exit(0)));
    });
}
