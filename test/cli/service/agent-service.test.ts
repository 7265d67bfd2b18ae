import { spawnSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { XMLParser } from 'fast-xml-parser';
import { describe, expect, it } from 'vitest';
import { launchFlags } from '../../../src/cli/common/launch.js';
import { systemdWord, windowsArgument } from '../../../src/cli/service/definitions.js';
import { ROOT, tempDir } from '../../helpers/mesh.js';
import { gpumeshRun } from '../../helpers/processes.js';

const TRICKY = 'image,"video" 100% $HOME\\';

describe('gpumesh agent service --print', () => {
  it('Linux: a systemd unit that systemd-analyze verifies, whose ExecStart keeps paths with spaces, % and $ as they are', async () => {
    const printed = await gpumeshRun(['agent', 'service', '--print', '--platform', 'linux', '--join', 'http://nas.local:7070',
      '--data', '/srv/gpu mesh/agent', '--', '--classes', TRICKY]);
    expect(printed.code, printed.output).toBe(0);
    const unit = printed.stdout;
    const execStart = /^ExecStart=(.*)$/m.exec(unit)![1]!;
    expect(execStart.startsWith(`${process.execPath} ${launchFlags().join(' ')} ${join(ROOT, 'bin/gpumesh.js')} agent --join http://nas.local:7070`)).toBe(true);
    expect(execStart).toContain('--data "/srv/gpu mesh/agent"');
    expect(execStart).toContain(`--classes ${systemdWord(TRICKY)}`);
    expect(systemdWord(TRICKY)).toBe('"image,\\"video\\" 100%% $$HOME\\\\"');
    expect(unit).toContain('Environment="GPUMESH_HOME=/srv/gpu mesh"');
    expect(unit).toContain('TimeoutStopSec=330');
    expect(unit).toContain('--grant-file /etc/gpumesh/agent.grant');
    expect(unit).not.toMatch(/--grant /);
    // The steps go to stderr, so `> file` keeps the unit alone.
    expect(printed.output).toContain('sudo systemctl daemon-reload && sudo systemctl enable --now gpumesh-agent');
    const file = join(tempDir(), 'gpumesh-agent.service');
    writeFileSync(file, unit);
    const verified = spawnSync('systemd-analyze', ['verify', file], { encoding: 'utf8' });
    if (verified.error) throw new Error(`systemd-analyze: ${verified.error.message} (\`npm run setup-tests\` installs Debian's systemd package)`);
    expect(verified.status, verified.stderr).toBe(0);
    // systemd before 254 does not know DelegateSubgroup (and ignores it, as the unit's comment says); nothing else is reported.
    expect(verified.stderr.split('\n').filter((line) => line && !line.includes("Unknown key 'DelegateSubgroup'"))).toEqual([]);
  });

  it('macOS: a launchd plist whose ProgramArguments are the agent\'s argv, exactly, with SIGTERM\'s drain given its time', async () => {
    const printed = await gpumeshRun(['agent', 'service', '--print', '--platform', 'macos', '--join', 'http://nas.local:7070,http://nas2.local:7070',
      '--drain-timeout', '120', '--', '--classes', `${TRICKY}<&>`]);
    expect(printed.code, printed.output).toBe(0);
    expect(printed.stdout).toMatch(/^<\?xml version="1.0" encoding="UTF-8"\?>\n<!DOCTYPE plist PUBLIC "-\/\/Apple\/\/DTD PLIST 1.0\/\/EN"/);
    const parsed = new XMLParser({ preserveOrder: true, ignoreDeclaration: true, processEntities: true }).parse(printed.stdout) as unknown[];
    const plist = (parsed.find((node) => 'plist' in (node as object)) as { plist: Array<{ dict: Array<Record<string, Array<{ '#text'?: string | number }>>> }> }).plist[0]!.dict;
    // A dict is its keys and values in turn.
    const entries = new Map<string, Record<string, unknown>>();
    for (let i = 0; i < plist.length; i += 2) entries.set(String(plist[i]!.key![0]!['#text']), plist[i + 1]!);
    const args = (entries.get('ProgramArguments')!.array as Array<{ string: Array<{ '#text': string | number }> }>).map((item) => String(item.string[0]!['#text']));
    const home = '/Users/<you>/Library/Application Support/gpumesh';
    expect(args).toEqual(['/usr/local/bin/node', ...launchFlags(), '/usr/local/lib/node_modules/gpumesh/bin/gpumesh.js', 'agent',
      '--join', 'http://nas.local:7070,http://nas2.local:7070', '--grant-file', `${home}/agent.grant`, '--data', `${home}/agent`,
      '--drain-timeout', '120', '--classes', `${TRICKY}<&>`]);
    expect(entries.get('Label')).toEqual({ string: [{ '#text': 'org.gpumesh.agent' }] });
    expect(entries.get('ExitTimeOut')).toEqual({ integer: [{ '#text': 150 }] });
    expect(entries.get('RunAtLoad')).toEqual({ true: [] });
    expect(printed.output).toContain('launchctl bootstrap gui/$(id -u) ~/Library/LaunchAgents/org.gpumesh.agent.plist');
  });

  it('a Windows argument survives CommandLineToArgvW\'s rules: spaces, quotes, trailing backslashes', () => {
    expect(windowsArgument('plain')).toBe('plain');
    expect(windowsArgument('')).toBe('""');
    expect(windowsArgument('C:\\Users\\Ana Lopez\\gpu mesh')).toBe('"C:\\Users\\Ana Lopez\\gpu mesh"');
    expect(windowsArgument('C:\\a b\\')).toBe('"C:\\a b\\\\"');
    expect(windowsArgument('say "hi"')).toBe('"say \\"hi\\""');
    expect(windowsArgument('a\\"b c')).toBe('"a\\\\\\"b c"');
  });

  it('refuses what a service must not carry, and says what is missing', async () => {
    const grant = await gpumeshRun(['agent', 'service', '--print', '--join', 'http://nas.local:7070', '--', '--grant', 'gm1.secret']);
    expect(grant.code).toBe(1);
    expect(grant.output).toContain('--grant after --: a service definition is readable by others and a grant is a secret');
    const noJoin = await gpumeshRun(['agent', 'service', '--print']);
    expect(noJoin.code).toBe(1);
    expect(noJoin.output).toContain('--join <urls>: the orchestrator the agent joins');
    const noPrint = await gpumeshRun(['agent', 'service', '--join', 'http://nas.local:7070']);
    expect(noPrint.code).toBe(1);
    expect(noPrint.output).toContain('say --print');
    const badUrl = await gpumeshRun(['agent', 'service', '--print', '--join', 'nas.local']);
    expect(badUrl.code).toBe(1);
    expect(badUrl.output).toContain('--join');
  });
});
