import { existsSync, mkdirSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { Command } from 'commander';
import type { Logger } from 'pino';
import type { MeshConfig, Orchestrator } from '../../orchestrator/index.js';
import { dataDir, dataDirHelp, LEGACY_DATA_DIR } from '../common/data-folder.js';
import { parseInteger } from '../common/output.js';

export interface ServeOptions {
  data?: string;
  config?: string;
  host?: string;
  port?: number;
  tls?: boolean;
  tlsName?: string[];
}

/** The config: --config, else <data>/mesh.yaml if present, else the defaults; flags override the file. */
export async function configFrom(options: ServeOptions): Promise<MeshConfig> {
  const { checkTlsSettings, loadConfigFile, resolveConfig } = await import('../../orchestrator/index.js');
  const data = dataDir(options.data);
  const file = options.config ?? (existsSync(join(data, 'mesh.yaml')) ? join(data, 'mesh.yaml') : null);
  const config = file ? loadConfigFile(file, data) : resolveConfig({}, data);
  if (options.data) config.data = data;
  // The store's URL may come from the environment (it holds a password, which a config file in a repository should not).
  const databaseUrl = process.env.GPUMESH_DATABASE_URL;
  if (databaseUrl) {
    config.store = config.store.kind === 'postgres' ? { ...config.store, url: databaseUrl } : resolveConfig({ store: { kind: 'postgres', url: databaseUrl } }, data).store;
  }
  if (options.host) config.server.host = options.host;
  if (options.port !== undefined) config.server.port = options.port;
  if (options.tls) config.server.tls.enabled = true;
  if (options.tlsName?.length) config.server.tls.names = [...config.server.tls.names, ...options.tlsName];
  checkTlsSettings(config.server);
  mkdirSync(config.data, { recursive: true });
  return config;
}

export function withServerOptions(command: Command): Command {
  return command
    .option('--data <dir>', `data folder (${dataDirHelp()})`)
    .option('-c, --config <file>', 'mesh.yaml (default: <data>/mesh.yaml when present)')
    .option('--host <address>', 'address to listen on (default 127.0.0.1)')
    .option('--port <n>', 'port to listen on (default 7070; 0 picks a free one)', parseInteger('--port'))
    .option('--tls', 'serve HTTPS with a private CA made on first start in <data>/tls; grants then name the CA, which agents and the CLI pin (server.tls.enabled)')
    .option('--tls-name <name>', 'another host name or IP address for the TLS certificate, e.g. nas.lan or 203.0.113.5; repeatable (server.tls.names)',
      (name: string, names: string[] | undefined) => [...(names ?? []), name]);
}

export async function startOrchestrator(config: MeshConfig, logger: Logger): Promise<Orchestrator> {
  if (config.store.kind === 'postgres') {
    // Several orchestrators on one PostgreSQL: this one stands by until it holds the mesh lease, and stops if it loses
    // it (exit code 75, EX_TEMPFAIL: a supervisor such as systemd starts it again, as a standby).
    const { startSharedOrchestrator } = await import('../../orchestrator/index.js');
    return startSharedOrchestrator({ config, logger, onLeaseLost: () => process.exit(75) });
  }
  // Loaded on demand: commands that only talk HTTP start faster without Fastify and SQLite.
  const { Orchestrator } = await import('../../orchestrator/index.js');
  const orchestrator = await Orchestrator.create({ config, logger });
  await orchestrator.listen();
  return orchestrator;
}

/**
 * How the CLI finds this mesh: the orchestrator records its URL in <data>/listen.json, which the CLI reads for its
 * data folder (dataDir); from anywhere else, name the folder or the URL.
 */
export function cliGuidance(data: string, url: string): string[] {
  const local = data !== dataDir(undefined) ? `gpumesh commands find it with --data ${data}`
    : data === resolve(LEGACY_DATA_DIR) ? 'gpumesh commands run in this folder find it' : 'gpumesh commands find it by default';
  return [
    `  cli      ${local} (${join(data, 'listen.json')} says where it listens); from elsewhere:`,
    `           export GPUMESH_HOME=${data}   or   gpumesh … --url ${url}`,
  ];
}

/** Close cleanly on SIGINT/SIGTERM; a second signal exits at once. */
export function onShutdown(stop: () => Promise<void>): void {
  let stopping = false;
  const handler = (): void => {
    if (stopping) process.exit(1);
    stopping = true;
    stop().then(() => process.exit(0), (error: unknown) => {
      process.stderr.write(`shutdown failed: ${(error as Error).message}\n`);
      process.exit(1);
    });
  };
  process.on('SIGINT', handler);
  process.on('SIGTERM', handler);
}

export function serveCommand(): Command {
  return withServerOptions(new Command('serve'))
    .description('Run the orchestrator alone (agents join from other hosts with `gpumesh agent`)')
    .action(async (options: ServeOptions) => {
      const config = await configFrom(options);
      const { pino } = await import('pino');
      const logger = pino({ level: process.env.GPUMESH_LOG_LEVEL ?? 'info' });
      const orchestrator = await startOrchestrator(config, logger);
      orchestrator.adminGrant();
      const tls = orchestrator.tlsCaFingerprint ? { tlsCaFingerprint: orchestrator.tlsCaFingerprint, tlsCa: join(config.data, 'tls', 'ca.crt') } : {};
      logger.info({
        url: orchestrator.url, data: config.data, adminGrant: join(config.data, 'admin.grant'), ...tls,
        cli: `the CLI finds this mesh through ${join(config.data, 'listen.json')}: --data ${config.data}, or GPUMESH_HOME=${config.data}, or --url ${orchestrator.url}`,
      }, 'orchestrator listening');
      onShutdown(() => orchestrator.close());
    });
}
