import path from 'node:path';
import { XMLBuilder } from 'fast-xml-parser';

/** The service managers gpumesh prints a definition for: systemd, launchd, and Windows' Task Scheduler. */
export type ServicePlatform = 'linux' | 'macos' | 'windows';

/** One agent, run as a service: what starts it, with what, where. */
export interface AgentService {
  platform: ServicePlatform;
  /** The Node that runs it, and the options the gpumesh command gives Node (launchFlags). */
  node: string;
  nodeFlags: readonly string[];
  /** The gpumesh command's script (bin/gpumesh.js). */
  bin: string;
  /** `agent` and its options: --join, --grant-file, --data, and what else the person gave. */
  agentArgs: readonly string[];
  /** The agent's data folder's parent (GPUMESH_HOME: `gpumesh agent drain` finds the agent's control endpoint from it). */
  home: string;
  /** The agent's --drain-timeout, in seconds: a stop waits this long and a little more before it kills. */
  drainTimeoutS: number;
  /** The orchestrator's URLs (--join), for the description. */
  join: string;
  /** Windows: the account the task runs as (DOMAIN\user); it runs at that account's logon. */
  windowsUser?: string;
  /** macOS: the file the agent's log goes to. */
  logFile?: string;
}

/** How long a service manager waits after the drain timeout before it kills: the agent's own leaving and exit. */
const STOP_GRACE_S = 30;

/** A service definition to save, and where and how to install it (for the person: on stderr, the file on stdout). */
export interface ServiceDefinition {
  /** The file's text. */
  text: string;
  /** Where it goes, or what it is saved as. */
  fileName: string;
  /** The steps that install and start it, in that platform's shell. */
  install: string[];
}

export function serviceDefinition(service: AgentService): ServiceDefinition {
  switch (service.platform) {
    case 'linux': return systemdUnit(service);
    case 'macos': return launchdAgent(service);
    case 'windows': return scheduledTask(service);
  }
}

const argv = (service: AgentService): string[] => [service.node, ...service.nodeFlags, service.bin, ...service.agentArgs];

/**
 * A word of ExecStart: bare where it has nothing systemd reads, else double-quoted with C escapes, and specifiers
 * (`%`) and variables (`$`) doubled, so a path with spaces or either sign reaches the agent as it is (systemd.service,
 * "Command lines"; systemd.unit, "Specifiers").
 */
export function systemdWord(word: string): string {
  const literal = word.replaceAll('%', '%%').replaceAll('$', '$$$$');
  if (/^[A-Za-z0-9_@+=:,./-]+$/.test(literal)) return literal;
  return `"${literal.replaceAll('\\', '\\\\').replaceAll('"', '\\"')}"`;
}

function systemdUnit(service: AgentService): ServiceDefinition {
  const lines = [
    '# gpumesh agent, as a systemd service (printed by `gpumesh agent service --print`; docs/operations.md, "As a service").',
    '[Unit]',
    `Description=gpumesh agent (joins the mesh at ${service.join})`,
    'Wants=network-online.target',
    'After=network-online.target',
    '',
    '[Service]',
    '# GPUMESH_HOME: `gpumesh agent drain` run as root finds this agent\'s control socket from it.',
    `Environment=${systemdWord(`GPUMESH_HOME=${service.home}`)}`,
    '# Its own folder: nothing an engine could resolve against the working directory is anything but the agent\'s state.',
    // The rest of the line, unquoted (systemd reads no quotes here); only its specifiers are escaped.
    `WorkingDirectory=${service.home.replaceAll('%', '%%')}`,
    `ExecStart=${argv(service).map(systemdWord).join(' ')}`,
    '# cgroup v2: the agent puts each engine process in a cgroup of its own under the unit\'s (memory, tasks, CPU limits).',
    'Delegate=yes',
    '# systemd 254+: the agent runs in <unit>/agent, so the unit\'s own cgroup holds no process and may have children.',
    'DelegateSubgroup=agent',
    'Restart=always',
    'RestartSec=5',
    '# Exit code 2: refused by the orchestrator (revoked or expired grant, another host id); a restart will not help.',
    'RestartPreventExitStatus=2',
    '# SIGTERM drains: the jobs in flight finish first (up to --drain-timeout), then the agent leaves.',
    'KillSignal=SIGTERM',
    `TimeoutStopSec=${service.drainTimeoutS + STOP_GRACE_S}`,
    '',
    '[Install]',
    'WantedBy=multi-user.target',
    '',
  ];
  return {
    text: lines.join('\n'),
    fileName: '/etc/systemd/system/gpumesh-agent.service',
    install: [
      'gpumesh agent service --print [the same options] | sudo tee /etc/systemd/system/gpumesh-agent.service >/dev/null',
      `sudo install -d -m 0700 ${path.posix.dirname(grantFile(service))} && sudo sh -c 'umask 077; cat > ${grantFile(service)}'   # paste the grant, then Ctrl-D`,
      'sudo systemctl daemon-reload && sudo systemctl enable --now gpumesh-agent',
      'journalctl -u gpumesh-agent -f                    # its log; `sudo systemctl stop gpumesh-agent` drains it',
    ],
  };
}

/** An option's value in the agent's arguments (every definition has --grant-file, never a grant, and --data). */
const optionValue = (service: AgentService, name: string): string => service.agentArgs[service.agentArgs.indexOf(name) + 1]!;
const grantFile = (service: AgentService): string => optionValue(service, '--grant-file');
const dataFolder = (service: AgentService): string => optionValue(service, '--data');

/** An XML builder whose nodes keep their order (a plist's dict is keys and values in turn). */
const orderedXml = new XMLBuilder({ preserveOrder: true, format: true, indentBy: '  ', ignoreAttributes: false, suppressEmptyNode: true });
type XmlNode = Record<string, unknown>;
const text = (value: string | number): XmlNode[] => [{ '#text': String(value) }];
const element = (name: string, children: XmlNode[] | string | number, attributes?: Record<string, string>): XmlNode => ({
  [name]: typeof children === 'object' ? children : text(children),
  ...(attributes ? { ':@': Object.fromEntries(Object.entries(attributes).map(([key, value]) => [`@_${key}`, value])) } : {}),
});

type PlistValue = string | number | boolean | readonly string[] | { readonly [key: string]: PlistValue };

function plistValue(value: PlistValue): XmlNode {
  if (typeof value === 'string') return element('string', value);
  if (typeof value === 'number') return element('integer', value);
  if (typeof value === 'boolean') return { [String(value)]: [] };
  if (Array.isArray(value)) return element('array', (value as readonly string[]).map((item) => element('string', item)));
  return element('dict', Object.entries(value).flatMap(([key, item]) => [element('key', key), plistValue(item)]));
}

function launchdAgent(service: AgentService): ServiceDefinition {
  const label = 'org.gpumesh.agent';
  const plist: PlistValue = {
    Label: label,
    ProgramArguments: argv(service),
    EnvironmentVariables: { GPUMESH_HOME: service.home },
    WorkingDirectory: service.home,
    RunAtLoad: true,
    // Started again when it ends with an error (a crash, a lost orchestrator it gave up on); a drain's exit 0 stays.
    KeepAlive: { SuccessfulExit: false },
    ThrottleInterval: 10,
    // launchctl stops it with SIGTERM, which drains; only after this long does launchd send SIGKILL.
    ExitTimeOut: service.drainTimeoutS + STOP_GRACE_S,
    StandardOutPath: service.logFile ?? path.posix.join(service.home, 'agent.log'),
    StandardErrorPath: service.logFile ?? path.posix.join(service.home, 'agent.log'),
  };
  const document = [
    { '?xml': text(''), ':@': { '@_version': '1.0', '@_encoding': 'UTF-8' } },
    element('plist', [plistValue(plist)], { version: '1.0' }),
  ];
  const doctype = '<!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">';
  const xml = orderedXml.build(document) as string;
  const file = `~/Library/LaunchAgents/${label}.plist`;
  return {
    text: `${xml.replace(/\?>\n/, `?>\n${doctype}\n`)}\n`,
    fileName: file,
    install: [
      `gpumesh agent service --print [the same options] > ${file}`,
      `mkdir -p "${path.posix.dirname(grantFile(service))}" && (umask 077; pbpaste > "${grantFile(service)}")   # with the grant copied`,
      `launchctl bootstrap gui/$(id -u) ${file}`,
      `tail -f "${service.logFile ?? path.posix.join(service.home, 'agent.log')}"   # its log; \`launchctl bootout gui/$(id -u)/${label}\` drains and stops it`,
    ],
  };
}

/**
 * One argument as Windows programs split their command line (CommandLineToArgvW, and Node's own): bare where it has
 * no space, tab or quote, else quoted, with the backslashes before a quote (and before the closing one) doubled.
 */
export function windowsArgument(argument: string): string {
  if (argument !== '' && !/[\s"]/.test(argument)) return argument;
  let quoted = '"';
  let backslashes = 0;
  for (const character of argument) {
    if (character === '\\') {
      backslashes += 1;
      continue;
    }
    quoted += '\\'.repeat(character === '"' ? backslashes * 2 + 1 : backslashes) + character;
    backslashes = 0;
  }
  return `${quoted}${'\\'.repeat(backslashes * 2)}"`;
}

function scheduledTask(service: AgentService): ServiceDefinition {
  const [command, ...rest] = argv(service);
  const user = service.windowsUser;
  const task = element('Task', [
    element('RegistrationInfo', [element('Description', `gpumesh agent: joins the mesh at ${service.join}`)]),
    element('Triggers', [element('LogonTrigger', [element('Enabled', 'true'), ...(user ? [element('UserId', user)] : [])])]),
    element('Principals', [element('Principal', [
      ...(user ? [element('UserId', user)] : []),
      element('LogonType', 'InteractiveToken'),
      element('RunLevel', 'LeastPrivilege'),
    ], { id: 'Author' })]),
    element('Settings', [
      element('MultipleInstancesPolicy', 'IgnoreNew'),
      // A laptop's agent runs on its battery too; the owner's own use is what it yields to.
      element('DisallowStartIfOnBatteries', 'false'),
      element('StopIfGoingOnBatteries', 'false'),
      element('StartWhenAvailable', 'true'),
      element('IdleSettings', [element('StopOnIdleEnd', 'false'), element('RestartOnIdle', 'false')]),
      // No time limit (PT0S): the agent runs until it is stopped.
      element('ExecutionTimeLimit', 'PT0S'),
      // Started again a minute after it fails, as systemd's Restart=always and launchd's KeepAlive.
      element('RestartOnFailure', [element('Interval', 'PT1M'), element('Count', 999)]),
      // Below normal (Task Scheduler's default, 7): the owner's games and programs come first.
      element('Priority', 7),
    ]),
    element('Actions', [element('Exec', [
      element('Command', command!),
      element('Arguments', rest.map(windowsArgument).join(' ')),
      element('WorkingDirectory', service.home),
    ])], { Context: 'Author' }),
  ], { version: '1.2', xmlns: 'http://schemas.microsoft.com/windows/2004/02/mit/task' });
  const document = [{ '?xml': text(''), ':@': { '@_version': '1.0', '@_encoding': 'UTF-16' } }, task];
  return {
    text: `${orderedXml.build(document) as string}\n`,
    fileName: 'gpumesh-agent.xml',
    install: [
      'gpumesh agent service --print [the same options] > gpumesh-agent.xml',
      `New-Item -ItemType Directory -Force "${path.win32.dirname(grantFile(service))}"; Get-Clipboard | Set-Content "${grantFile(service)}"   # with the grant copied`,
      'Register-ScheduledTask -TaskName gpumesh-agent -Xml (Get-Content gpumesh-agent.xml -Raw); Start-ScheduledTask gpumesh-agent',
      `gpumesh agent drain --data ${windowsArgument(dataFolder(service))}   # drains it (the task then ends); Task Scheduler's End stops it at once, and its engine processes with it (job objects)`,
    ],
  };
}
