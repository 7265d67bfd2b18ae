import { spawnSync } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import { lchown, lstat, readdir } from 'node:fs/promises';
import { userInfo } from 'node:os';
import { join } from 'node:path';
import type { Logger } from 'pino';

/** A user engine processes run as: its ids, for spawn's `uid` and `gid`. */
export interface EngineIdentity {
  user: string;
  uid: number;
  gid: number;
}

/** Who the agent's engine processes run as, and why (for the start log line, the hello and `gpumesh status`). */
export interface EngineUser {
  /** The user to switch to; null: the agent's own. */
  identity: EngineIdentity | null;
  /** In words: `nobody`, `root (--engine-user root)`, `root: nobody cannot read /root/x …`, or the agent's user. */
  description: string;
  /** Whether they run as a user of their own, unprivileged (false: as the agent's user, which is root). */
  unprivileged: boolean;
}

/** What an engine process must reach, for the probe: files and folders to read, folders to pass through. */
export interface EngineReach {
  read: readonly string[];
  /** Folders it needs to enter, not list (its own working folders are made inside, its own). */
  enter: readonly string[];
}

/**
 * The engine user of an agent whose data folder is `dataDir`, said in the log (loudly where engines run as root).
 * What engine processes need is made first — the model cache, and the folder they work in (0711: entered, not
 * listed) — so the probe as the engine user can check it, with `code` (the programs they run: node, the ONNX worker).
 */
export function prepareEngineUser(options: { requested: string | undefined; dataDir: string; code: readonly string[]; log: Logger }): { engineUser: EngineUser; workRoot: string } {
  const { log } = options;
  const models = join(options.dataDir, 'models');
  const workRoot = join(options.dataDir, 'engines');
  mkdirSync(models, { recursive: true });
  mkdirSync(workRoot, { recursive: true, mode: 0o711 });
  const engineUser = resolveEngineUser(options.requested, { read: [...options.code, models], enter: [workRoot] });
  if (engineUser.unprivileged) log.info({ engineUser: engineUser.description }, `engine processes run as ${engineUser.description}`);
  else {
    log.warn({ engineUser: engineUser.description }, `engine processes run as ${engineUser.description}: what an engine reads is not kept from root's files. ` +
      'Give the engine user access to those folders (chmod o+x on each folder above them), or run the agent as an ordinary user');
  }
  return { engineUser, workRoot };
}

/** The default engine user of an agent running as root: the one every Unix has for exactly this. */
export const DEFAULT_ENGINE_USER = 'nobody';

/**
 * Who the engine processes run as. An agent that runs as an ordinary user runs them as itself (it cannot switch, and
 * its engines hold nothing more than it does). An agent that runs as root runs them as `requested` (default
 * `nobody`), so that what an engine reads (a model's external data, a server's own file handling, a command's
 * mistakes) can never be the agent's grant, the orchestrator's signing key or another user's files: those are root's
 * and 0600. Before it switches, a probe as that user checks it can reach what engines need (`reach`: the ONNX worker's
 * code, the node binary, the model cache, the folder engines work in); if not, engines run as root and the
 * description says which path the user could not reach, so the log line and `gpumesh status` can say what to fix.
 * `requested: 'root'` keeps them root on purpose. An unknown user is an error (the agent's options are wrong).
 */
export function resolveEngineUser(requested: string | undefined, reach: EngineReach, runningUid = process.getuid?.() ?? -1): EngineUser {
  const self = agentUser();
  if (runningUid !== 0) {
    if (requested && requested !== self) throw new Error(`--engine-user ${requested}: only an agent running as root can run its engines as another user (this one runs as ${self})`);
    return { identity: null, description: self, unprivileged: true };
  }
  const user = requested ?? DEFAULT_ENGINE_USER;
  if (user === 'root') return { identity: null, description: 'root (--engine-user root)', unprivileged: false };
  const identity = lookUp(user);
  const unreachable = probe(identity, reach);
  if (unreachable) return { identity: null, description: `root: ${user} cannot ${unreachable}`, unprivileged: false };
  return { identity, description: user, unprivileged: true };
}

/** The agent's own user's name (Windows and macOS too), or words for one that has none. */
function agentUser(): string {
  try {
    return userInfo().username;
  } catch {
    return 'the agent\'s user';
  }
}

function lookUp(user: string): EngineIdentity {
  const id = (flag: string): number => {
    const answer = spawnSync('id', [flag, user], { encoding: 'utf8' });
    const value = Number(answer.stdout?.trim());
    if (answer.status !== 0 || !Number.isInteger(value)) throw new Error(`--engine-user ${user}: no such user on this host (${(answer.stderr ?? '').trim() || `id ${flag} failed`})`);
    return value;
  };
  return { user, uid: id('-u'), gid: id('-g') };
}

/**
 * What the user cannot do among `reach`, in words (`read /root/app/dist/…`), or null when it can do all of it: asked
 * of the system as that user (a process of its own), so modes, ACLs and every folder on the way count as they will.
 */
function probe(identity: EngineIdentity, reach: EngineReach): string | null {
  const script = [
    'const fs=require("fs");const [n,...p]=process.argv.slice(1);const r=p.slice(0,+n),w=p.slice(+n);',
    'for(const f of r){try{fs.accessSync(f,fs.constants.R_OK)}catch(e){console.log("read "+f);process.exit(0)}}',
    'for(const d of w){try{fs.accessSync(d,fs.constants.X_OK)}catch(e){console.log("enter "+d);process.exit(0)}}',
  ].join('');
  const answer = spawnSync(process.execPath, ['-e', script, String(reach.read.length), ...reach.read, ...reach.enter], {
    uid: identity.uid, gid: identity.gid, cwd: '/', encoding: 'utf8', timeout: 10_000, env: { PATH: process.env.PATH ?? '/usr/bin:/bin' },
  });
  if (answer.error) return `run ${process.execPath} (${answer.error.message})`;
  if (answer.status !== 0) return `run ${process.execPath} (${(answer.stderr ?? '').trim().split('\n').pop() ?? `exit ${answer.status}`})`;
  return answer.stdout.trim() || null;
}

/**
 * Give a folder the agent made (an engine's scratch: its input, the folders it writes its outputs in) to the engine
 * user, whole: what the agent wrote there becomes the engine's to read and replace. Nothing to do without one.
 */
export async function handOver(path: string, identity: EngineIdentity | null): Promise<void> {
  if (!identity) return;
  const pending = [path];
  while (pending.length > 0) {
    const next = pending.pop()!;
    await lchown(next, identity.uid, identity.gid);
    if ((await lstat(next)).isDirectory()) for (const entry of await readdir(next)) pending.push(join(next, entry));
  }
}
