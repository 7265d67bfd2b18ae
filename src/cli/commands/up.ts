import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { chmodSync, mkdirSync, openSync, readdirSync, statSync, writeFileSync } from 'node:fs';
import { hostname } from 'node:os';
import { dirname, join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { Command, Option } from 'commander';
import type { Logger } from 'pino';
import { caveatsFromOptions, DURATION, GALLERY_GRANT_SUMMARY, galleryGrantOptions, meshViewGrantOptions } from '../../protocol/api/index.js';
import { VERSION } from '../../version.js';
import { gpumeshArgs } from '../common/launch.js';
import { CliError, parseInteger } from '../common/output.js';
import type { AgentOptions, HostConfigFile } from '../../agent/index.js';
import type { Orchestrator } from '../../orchestrator/index.js';
import { cliGuidance, configFrom, onShutdown, startOrchestrator, withServerOptions, type ServeOptions } from './serve.js';
import { backoffDelay } from '../../net/backoff.js';
import { systemClock } from '../../protocol/clock.js';


/**
 * The agent process `up` runs next to the orchestrator. If it dies (a crash,
 * an OOM kill, a stray signal) it is started again after a growing pause,
 * unless the orchestrator refused it (exit code 2), which a restart would not mend.
 */
class LocalAgent implements LocalAgentHandle {
  #child: ChildProcess;
  #stopping = false;
  #restarts = 0;
  refused = false;

  constructor(private readonly start: () => ChildProcess, private readonly log: Logger) {
    this.#child = this.#launch();
  }

  #launch(): ChildProcess {
    const child = this.start();
    const startedAt = systemClock.now();
    child.once('exit', (code, signal) => {
      if (this.#stopping) return;
      if (code === 2) {
        this.refused = true;
        this.log.error({ code }, 'the local agent was refused by the orchestrator; not restarting it');
        return;
      }
      // A run that lasted a minute resets the backoff.
      if (systemClock.now() - startedAt > 60_000) this.#restarts = 0;
      const delay = backoffDelay({ initialMs: 500, maxMs: 30_000 }, ++this.#restarts);
      this.log.warn({ code, signal, restartInMs: delay }, 'the local agent exited; restarting it');
      systemClock.setTimer(delay, () => {
        if (!this.#stopping) this.#child = this.#launch();
      });
    });
    return child;
  }

  async stop(): Promise<void> {
    this.#stopping = true;
    const child = this.#child;
    if (child.exitCode !== null || child.signalCode !== null) return;
    const exited = once(child, 'exit');
    // Closing the IPC channel stops it at once; SIGTERM would drain it, waiting for its work in flight,
    // which is not worth it while the orchestrator goes down with it.
    if (child.connected) child.disconnect();
    else child.kill('SIGTERM');
    await exited;
  }
}

/**
 * Run as root, the local agent's engines run as an unprivileged user (resolveEngineUser), who needs to reach the
 * agent's folder (`<data>/agent`: the model cache, the engines' working folders) through the data folder. The data
 * folder becomes passable (0711: entered, not listed) and everything else in it is closed to other users: the key,
 * grants and store are 0600 already; the folders beside the agent's become 0700. Nothing to do for an ordinary user,
 * whose engines run as itself.
 */
function openToEngines(data: string): void {
  if (process.getuid?.() !== 0) return;
  chmodSync(data, 0o711);
  for (const entry of readdirSync(data, { withFileTypes: true })) {
    if (entry.name === 'agent') continue;
    chmodSync(join(data, entry.name), entry.isDirectory() ? 0o700 : statSync(join(data, entry.name)).mode & 0o700);
  }
}

/** What `up` needs of its local agent, wherever it runs. */
interface LocalAgentHandle {
  /** The orchestrator refused it; waiting for it to connect is pointless. */
  readonly refused: boolean;
  stop(): Promise<void>;
}

/**
 * The local agent in this process, linked to the orchestrator in memory (Orchestrator.connectLocalAgent): no
 * second Node.js process and no loopback socket between the two, which on a small machine were the largest
 * cost of a job's trip through the mesh. Its engines still run in processes of their own, as on any host.
 */
async function inProcessAgent(orchestrator: Orchestrator, options: AgentOptions, hostModels: HostConfigFile): Promise<LocalAgentHandle> {
  const { Agent, HostConfig } = await import('../../agent/index.js');
  const handle = { refused: false, stop: async () => agent.close() };
  const hostConfig = HostConfig.of(hostModels, 'mesh.yaml');
  const agent = await Agent.create({ ...options, hostConfig, connect: () => orchestrator.connectLocalAgent(options.grant) });
  agent.start((reason) => {
    handle.refused = true;
    options.log?.error({ reason }, 'the local agent was refused by the orchestrator');
  });
  return handle;
}

interface UpOptions extends ServeOptions {
  agent: boolean;
  agentProcess?: boolean;
  cpuBudget?: number;
  idleUnload?: number;
  verbose?: boolean;
  galleryTtl?: string;
  engineUser?: string;
  governance: 'auto' | 'portable';
}

export function upCommand(): Command {
  return withServerOptions(new Command('up'))
    .description('Bring up a whole mesh on this machine: the orchestrator, a local agent and the built-in models')
    .option('--no-agent', 'start only the orchestrator')
    .option('--agent-process', 'run the local agent as a process of its own, over the WebSocket link (restarted if it dies), instead of inside this one')
    .option('--cpu-budget <MB>', 'memory for models on the local agent\'s CPU', parseInteger('--cpu-budget'))
    .option('--idle-unload <seconds>', 'the local agent unloads a model idle this long (default 300)', parseInteger('--idle-unload'))
    .option('-v, --verbose', 'log to the terminal instead of <data>/logs/')
    .addOption(new Option('--governance <mode>', 'how the local agent governs its engine processes: auto (the platform\'s way) or portable (process groups with a lifeline, memory read by polling)')
      .choices(['auto', 'portable']).default('auto'))
    .option('--engine-user <user>', 'run as root: the user the local agent\'s engine processes run as (default nobody; root keeps them root)')
    .option('--gallery-ttl <duration>', 'how long the gallery and mesh links work, e.g. 90m, 12h, 7d (default: gallery.grantTtl in mesh.yaml, else 12h)')
    .action(async (options: UpOptions) => {
      if (options.galleryTtl !== undefined && !DURATION.test(options.galleryTtl)) {
        throw new CliError(`--gallery-ttl must be a duration such as 90m, 12h or 7d, not "${options.galleryTtl}"`);
      }
      const config = await configFrom(options);
      const logs = join(config.data, 'logs');
      mkdirSync(logs, { recursive: true });
      const level = process.env.GPUMESH_LOG_LEVEL ?? 'info';
      const { pino } = await import('pino');
      const logger = options.verbose ? pino({ level }, pino.destination(2)) : pino({ level }, pino.destination(join(logs, 'orchestrator.log')));
      const orchestrator = await startOrchestrator(config, logger);
      const url = orchestrator.url;
      orchestrator.adminGrant();
      // The gallery link carries its grant in the URL: it may only submit and read images and clips in its albums, briefly.
      const galleryTtl = options.galleryTtl ?? config.gallery.grantTtl;
      const galleryCaveats = caveatsFromOptions(galleryGrantOptions(config.gallery.albums, galleryTtl), systemClock.now());
      const gallery = orchestrator.mint('client', galleryCaveats, 'gallery page');
      const galleryUntil = galleryCaveats.find((line) => line.startsWith('time-before '))!.slice('time-before '.length);
      // The mesh view's link: it may read mesh status and follow jobs, nothing else (no submitting, no pictures), as briefly.
      const meshView = orchestrator.mint('client', caveatsFromOptions(meshViewGrantOptions(galleryTtl), systemClock.now()), 'mesh view');

      const host = hostname();
      const classes = [...new Set(Object.values(config.routing).flat())];
      const agentGrant = (): string => orchestrator.mint('agent', [`host ${host}`, `classes ${classes.join(',')}`], 'local agent of gpumesh up');
      let agent: LocalAgentHandle | null = null;
      // Run as root, the agent's engines run as another user, who must pass through the data folder to the agent's.
      if (options.agent) openToEngines(config.data);
      // mesh.yaml is this machine's own config: the commands and servers it declares are its own agent's to run.
      const hostModels = { models: Object.fromEntries(Object.entries(config.models)
        .filter(([, entry]) => entry.engine !== undefined && entry.settings !== undefined)
        .map(([name, entry]) => [name, { settings: entry.settings! }])) };
      if (options.agent && !options.agentProcess) {
        const agentLog = options.verbose ? logger.child({ part: 'agent' }) : pino({ level }, pino.destination(join(logs, 'agent.log')));
        agent = await inProcessAgent(orchestrator, {
          log: agentLog, url, grant: agentGrant(), host, classes, dataDir: join(config.data, 'agent'),
          cpuBudgetMB: options.cpuBudget, ...(options.idleUnload !== undefined ? { idleUnloadMs: options.idleUnload * 1000 } : {}),
          ...(options.engineUser ? { engineUser: options.engineUser } : {}),
          governance: { mode: options.governance },
        }, hostModels);
      } else if (options.agent) agent = new LocalAgent(() => {
        const grant = agentGrant();
        const args = ['agent', '--url', url, '--host', host, '--classes', classes.join(','), '--data', join(config.data, 'agent')];
        if (options.cpuBudget) args.push('--cpu-budget', String(options.cpuBudget));
        if (options.idleUnload !== undefined) args.push('--idle-unload', String(options.idleUnload));
        if (options.engineUser) args.push('--engine-user', options.engineUser);
        if (options.governance !== 'auto') args.push('--governance', options.governance);
        // The agent process reads this machine's config as any agent reads its host's: from a file.
        const hostFile = join(config.data, 'agent', 'host.json');
        mkdirSync(dirname(hostFile), { recursive: true });
        writeFileSync(hostFile, `${JSON.stringify(hostModels, null, 2)}\n`, { mode: 0o600 });
        args.push('--config', hostFile);
        const output = options.verbose ? 'inherit' : openSync(join(logs, 'agent.log'), 'a');
        return spawn(process.execPath, gpumeshArgs(args), {
          // The grant travels in the environment, not argv, so `ps` does not show it.
          // Its grant names this mesh's CA; a fingerprint meant for some other mesh must not be pinned too.
          env: { ...process.env, GPUMESH_GRANT: grant, GPUMESH_LOG_LEVEL: level, GPUMESH_TLS_CA_FINGERPRINT: undefined },
          // The IPC channel is a lifeline: if `up` dies, even by SIGKILL, the agent sees it close and exits.
          stdio: ['ignore', output, output, 'ipc'],
        });
      }, logger);
      if (agent) {
        const deadline = systemClock.now() + 60_000;
        while (orchestrator.agentsConnected === 0) {
          if (agent.refused) throw new CliError(`the local agent was refused; see ${join(logs, 'agent.log')}`);
          if (systemClock.now() > deadline) throw new CliError(`the local agent did not connect within 60 s; see ${join(logs, 'agent.log')}`);
          await sleep(50);
        }
      }
      // What the local agent cannot serve (video without ffmpeg) is said here, not only in its log.
      const local = orchestrator.hosts().find((entry) => entry.id === host && entry.connected);
      const off = Object.entries(local?.unavailable ?? {});
      const ffmpeg = local?.tools.find((tool) => tool.name === 'ffmpeg');
      const lines = [
        `gpumesh ${VERSION} is up`,
        `  gallery  ${url}/#grant=${gallery}`,
        `           ${GALLERY_GRANT_SUMMARY} in album ${config.gallery.albums.join(', ')}, until ${galleryUntil} (\`gpumesh grant gallery\` mints a new link)`,
        `  mesh     ${url}/mesh#grant=${meshView}`,
        `           hosts, devices, breakers, queues (read only), until ${galleryUntil} (\`gpumesh grant mesh\` mints a new link)`,
        `  api      ${url}  (OpenAPI at ${url}/openapi.json)`,
        `  admin    grant in ${join(config.data, 'admin.grant')}`,
        `  agent    ${options.agent ? `${host}, connected${options.agentProcess ? ' (its own process)' : ''}` : 'none (--no-agent)'}`,
        ...off.map(([klass, reason]) => `           ${klass}: off — ${reason}`),
        ...(ffmpeg ? [`           video: on — ffmpeg ${ffmpeg.path} (${ffmpeg.source})`] : []),
        ...(orchestrator.tlsCaFingerprint ? [
          `  tls      private CA ${orchestrator.tlsCaFingerprint}`,
          `           (${join(config.data, 'tls', 'ca.crt')}; grants pin it. A browser warns about the gallery until you trust that file, or compare this fingerprint)`,
        ] : []),
        `  logs     ${options.verbose ? 'this terminal' : logs}`,
        ...cliGuidance(config.data, url),
        '',
        'Try:  npx gpumesh submit --type image --prompt "a lighthouse at dusk" --wait',
        `      npx gpumesh submit --frames 48 --fps 24 --prompt "waves on a shore" --wait   (a clip${off.some(([klass]) => klass === 'video') ? ': refused while video is off here' : ''})`,
        'Stop: Ctrl-C',
      ];
      process.stdout.write(`${lines.join('\n')}\n`);
      onShutdown(async () => {
        await agent?.stop();
        await orchestrator.close();
      });
    });
}
