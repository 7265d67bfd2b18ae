import { posix } from 'node:path';

/** A mounted cgroup hierarchy, from /proc/self/mountinfo. */
export interface CgroupMount {
  version: 1 | 2;
  /** Where it is mounted (`/sys/fs/cgroup/memory`, `/sys/fs/cgroup/unified`, …). */
  mountPoint: string;
  /** The cgroup of the hierarchy that is mounted there (`/` unless a container bind-mounted a subtree). */
  root: string;
  /** v1: the controllers bound to this hierarchy (`memory`, `cpu`, `cpuacct`, …). v2: empty (read `cgroup.controllers`). */
  controllers: string[];
}

/** The calling process's cgroups, from /proc/self/cgroup. */
export interface OwnCgroups {
  /** Its cgroup in the v2 hierarchy (`0::/path`), or null. */
  v2: string | null;
  /** Its cgroup per v1 controller. */
  v1: Map<string, string>;
}

/** mountinfo escapes space, tab, newline and backslash as octal (`\040`). */
const unescape = (field: string): string => field.replace(/\\([0-7]{3})/g, (_, octal: string) => String.fromCharCode(parseInt(octal, 8)));

/** Options that are not controller names, in a v1 mount's super options. */
const NOT_CONTROLLERS = /^(rw|ro|name=.*|release_agent=.*|clone_children|noprefix|xattr|cpuset_v2_mode|favordynmods|nsdelegate|memory_recursiveprot|memory_localevents|memory_hugetlb_accounting)$/;

/**
 * The cgroup filesystems in a mountinfo text. Each line is
 * `id parent major:minor root mountpoint options [optional…] - fstype source superoptions`.
 */
export function parseMountinfo(text: string): CgroupMount[] {
  const mounts: CgroupMount[] = [];
  for (const line of text.split('\n')) {
    const fields = line.trim().split(' ');
    const separator = fields.indexOf('-');
    if (separator < 6 || fields.length < separator + 4) continue;
    const fstype = fields[separator + 1];
    if (fstype !== 'cgroup' && fstype !== 'cgroup2') continue;
    const controllers = fstype === 'cgroup'
      ? fields[separator + 3]!.split(',').filter((option) => !NOT_CONTROLLERS.test(option))
      : [];
    mounts.push({ version: fstype === 'cgroup2' ? 2 : 1, mountPoint: unescape(fields[4]!), root: unescape(fields[3]!), controllers });
  }
  return mounts;
}

/** Parse /proc/self/cgroup: `hierarchy-id:controllers:path` lines. */
export function parseOwnCgroups(text: string): OwnCgroups {
  const own: OwnCgroups = { v2: null, v1: new Map() };
  for (const line of text.split('\n')) {
    const match = /^(\d+):([^:]*):(.*)$/.exec(line.trim());
    if (!match) continue;
    const [, id, list, path] = match as unknown as [string, string, string, string];
    if (id === '0' && list === '') own.v2 = path;
    else for (const controller of list.split(',')) if (controller && !controller.startsWith('name=')) own.v1.set(controller, path);
  }
  return own;
}

/**
 * The directory of `cgroupPath` under a mount. A container may mount a subtree
 * (root `/docker/abc`) while /proc/self/cgroup names the full path; a cgroup
 * namespace shows paths relative to the mounted root already.
 */
export function cgroupDirectory(mount: CgroupMount, cgroupPath: string): string {
  let relative = cgroupPath;
  if (mount.root !== '/' && (cgroupPath === mount.root || cgroupPath.startsWith(`${mount.root}/`))) {
    relative = cgroupPath.slice(mount.root.length);
  }
  const dir = posix.join(mount.mountPoint, relative);
  return dir.length > 1 && dir.endsWith('/') ? dir.slice(0, -1) : dir;
}
