import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { Command, Option } from 'commander';
import { platformDataDir } from '../common/data-folder.js';
import { launchFlags } from '../common/launch.js';
import { CliError, parseInteger } from '../common/output.js';
import { parseUrlList } from '../common/url-list.js';
import type { AgentService, ServicePlatform } from '../service/definitions.js';

interface ServiceFlags {
  print?: boolean;
  join?: string;
  grantFile?: string;
  data?: string;
  platform: ServicePlatform;
  drainTimeout: number;
  user?: string;
}

const THIS_PLATFORM: ServicePlatform = process.platform === 'win32' ? 'windows' : process.platform === 'darwin' ? 'macos' : 'linux';

/**
 * Where a service's agent lives on each platform when --data says nothing: Linux's system service in systemd's state
 * folder (the unit's StateDirectory), a Mac's and a Windows user's in their platform data folder — the folder
 * `gpumesh agent drain` run by that user finds it in with no options.
 */
function serviceHome(platform: ServicePlatform): string {
  if (platform === 'linux') return '/var/lib/gpumesh';
  if (platform === THIS_PLATFORM) return platformDataDir();
  return platform === 'windows' ? platformDataDir('win32', { LOCALAPPDATA: '%LOCALAPPDATA%' }) : platformDataDir('darwin', {}, '/Users/<you>');
}

/** The Node and gpumesh command a service starts: this ones on this platform, where a global install puts them elsewhere. */
function programs(platform: ServicePlatform): { node: string; bin: string } {
  if (platform === THIS_PLATFORM) return { node: process.execPath, bin: fileURLToPath(new URL('../../../bin/gpumesh.js', import.meta.url)) };
  if (platform === 'windows') return { node: 'C:\\Program Files\\nodejs\\node.exe', bin: '%APPDATA%\\npm\\node_modules\\gpumesh\\bin\\gpumesh.js' };
  if (platform === 'macos') return { node: '/usr/local/bin/node', bin: '/usr/local/lib/node_modules/gpumesh/bin/gpumesh.js' };
  return { node: '/usr/bin/node', bin: '/usr/lib/node_modules/gpumesh/bin/gpumesh.js' };
}

/** Options that must not go into a service definition, with why. */
const REFUSED: Record<string, string> = {
  '--grant': 'a service definition is readable by others and a grant is a secret: give --grant-file (the printed steps say how to write it)',
  '--url': 'give the orchestrator with --join',
};

export function buildAgentService(flags: ServiceFlags, extra: readonly string[]): AgentService {
  if (!flags.join) throw new CliError('--join <urls>: the orchestrator the agent joins, as in the join line (`gpumesh grant create --agent` prints it)');
  const join = parseUrlList(flags.join, '--join').join(',');
  for (const option of extra) {
    const name = option.split('=')[0]!;
    if (REFUSED[name]) throw new CliError(`${name} after --: ${REFUSED[name]}`);
    if (['--join', '--grant-file', '--data', '--drain-timeout'].includes(name)) throw new CliError(`${name}: give it before --, as an option of \`gpumesh agent service\``);
  }
  const windows = flags.platform === 'windows';
  const paths = windows ? path.win32 : path.posix;
  const home = flags.data ? paths.dirname(paths.resolve(flags.data)) : serviceHome(flags.platform);
  const data = flags.data ? paths.resolve(flags.data) : paths.join(home, 'agent');
  const grantFile = flags.grantFile ?? (flags.platform === 'linux' ? '/etc/gpumesh/agent.grant' : paths.join(home, 'agent.grant'));
  const { node, bin } = programs(flags.platform);
  const user = flags.user ?? (windows && process.env.USERNAME ? `${process.env.USERDOMAIN ? `${process.env.USERDOMAIN}\\` : ''}${process.env.USERNAME}` : undefined);
  return {
    platform: flags.platform, node, bin, nodeFlags: launchFlags(),
    agentArgs: [
      'agent', '--join', join, '--grant-file', grantFile, '--data', data, '--drain-timeout', String(flags.drainTimeout),
      // The unit's own cgroup, delegated to it (Delegate=yes): each engine process's cgroup is made under it.
      ...(flags.platform === 'linux' ? ['--cgroup-root', '/sys/fs/cgroup/system.slice/gpumesh-agent.service'] : []),
      ...extra,
    ],
    home, drainTimeoutS: flags.drainTimeout, join,
    ...(user ? { windowsUser: user } : {}),
    ...(flags.platform === 'macos' ? { logFile: path.posix.join(home, 'agent.log') } : {}),
  };
}

export function agentServiceCommand(): Command {
  return new Command('service')
    .summary('Print a service definition that runs this host\'s agent at boot or logon (systemd, launchd, Task Scheduler)')
    .description([
      'Print the definition of a service that runs `gpumesh agent` on this machine and keeps it running: a systemd unit on Linux, a launchd agent (plist) on macOS, a Task Scheduler task (XML, at your logon) on Windows. The definition goes to stdout, the steps that install it to stderr: `gpumesh agent service --print --join <url> > <file>`.',
      'The grant is read from a file (--grant-file), never written into the definition. Further agent options go after --: gpumesh agent service --print --join http://nas.local:7070 -- --classes image --cpu-budget 4096',
      'Stopping the service drains the agent (SIGTERM on Linux and macOS; on Windows run `gpumesh agent drain` first, or Task Scheduler\'s End stops it at once with its engine processes).',
    ].join('\n'))
    .option('--print', 'print the definition (gpumesh installs no service itself: that needs the rights only you should use)')
    .option('--join <urls>', 'the orchestrator to join, or several sharing one store, comma-separated (as in the join line)')
    .option('--grant-file <path>', 'the file the agent reads its grant from (default /etc/gpumesh/agent.grant on Linux, agent.grant in the data folder on macOS and Windows)')
    .option('--data <dir>', 'the agent\'s data folder (default /var/lib/gpumesh/agent on Linux, <the platform\'s data folder>/agent on macOS and Windows)')
    .addOption(new Option('--platform <platform>', 'the platform to print for (default this one)').choices(['linux', 'macos', 'windows']).default(THIS_PLATFORM))
    .option('--drain-timeout <seconds>', 'the agent\'s --drain-timeout; a stop waits this long and 30 s more before it kills', parseInteger('--drain-timeout'), 300)
    .option('--user <account>', 'Windows: the account (DOMAIN\\user) whose logon starts the task (default the one running this)')
    .argument('[agent-options...]', 'further `gpumesh agent` options, after --')
    .action(async (extra: string[], flags: ServiceFlags) => {
      if (!flags.print) throw new CliError('say --print: gpumesh prints the service definition for you to install (it installs none itself)');
      const { serviceDefinition } = await import('../service/definitions.js');
      const definition = serviceDefinition(buildAgentService(flags, extra));
      process.stdout.write(definition.text);
      process.stderr.write([`Save it as ${definition.fileName}, then:`, ...definition.install.map((step) => `  ${step}`), ''].join('\n'));
    });
}
