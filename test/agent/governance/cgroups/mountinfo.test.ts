import { describe, expect, it } from 'vitest';
import { cgroupDirectory, parseMountinfo, parseOwnCgroups } from '../../../../src/agent/governance/cgroups/mountinfo.js';

// A hybrid host (this project's CI machine): v1 controllers, and v2 mounted at /sys/fs/cgroup/unified.
const HYBRID = `30 22 0:27 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
31 30 0:28 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
34 30 0:31 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
38 30 0:35 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
39 30 0:36 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
40 30 0:37 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw`;

// A systemd host on the unified hierarchy, with optional fields before the separator.
const UNIFIED = `25 22 0:22 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot
26 22 0:23 / /sys/fs/pstore rw shared:10 - pstore pstore rw`;

// A container that sees a subtree of the host's v1 hierarchy, with a combined cpu,cpuacct mount and a space in a path.
const CONTAINER = `700 699 0:40 /docker/abc /sys/fs/cgroup/cpu,cpuacct ro,nosuid master:17 - cgroup cgroup rw,cpu,cpuacct
701 699 0:41 /docker/abc /sys/fs/cgroup/memory rw,nosuid master:18 - cgroup cgroup rw,memory
702 699 0:42 / /mnt/odd\\040place rw - cgroup2 none rw`;

describe('finding cgroup mounts without hard-coded paths', () => {
  it('reads v1 controllers and the v2 mount of a hybrid host', () => {
    const mounts = parseMountinfo(HYBRID);
    expect(mounts.map((mount) => [mount.version, mount.mountPoint, mount.controllers.join(',')])).toEqual([
      [1, '/sys/fs/cgroup/cpu', 'cpu'],
      [1, '/sys/fs/cgroup/memory', 'memory'],
      [1, '/sys/fs/cgroup/pids', 'pids'],
      [1, '/sys/fs/cgroup/systemd', ''],
      [2, '/sys/fs/cgroup/unified', ''],
    ]);
  });

  it('reads a unified host and a container with a mounted subtree and escaped paths', () => {
    expect(parseMountinfo(UNIFIED)).toEqual([{ version: 2, mountPoint: '/sys/fs/cgroup', root: '/', controllers: [] }]);
    const mounts = parseMountinfo(CONTAINER);
    expect(mounts[0]).toMatchObject({ mountPoint: '/sys/fs/cgroup/cpu,cpuacct', root: '/docker/abc', controllers: ['cpu', 'cpuacct'] });
    expect(mounts[2]!.mountPoint).toBe('/mnt/odd place');
    expect(cgroupDirectory(mounts[1]!, '/docker/abc/agent')).toBe('/sys/fs/cgroup/memory/agent');
    expect(cgroupDirectory(mounts[1]!, '/docker/abc')).toBe('/sys/fs/cgroup/memory');
  });

  it('reads the process’s own cgroups, per v1 controller and on v2', () => {
    const own = parseOwnCgroups('9:name=systemd:/\n4:memory:/process_api/abc\n2:cpu,cpuacct:/x\n0::/user.slice/agent.service\n');
    expect(own.v2).toBe('/user.slice/agent.service');
    expect(own.v1.get('memory')).toBe('/process_api/abc');
    expect(own.v1.get('cpu')).toBe('/x');
    expect(own.v1.get('cpuacct')).toBe('/x');
    expect(own.v1.has('name=systemd')).toBe(false);
    expect(cgroupDirectory({ version: 1, mountPoint: '/sys/fs/cgroup/memory', root: '/', controllers: ['memory'] }, '/process_api/abc'))
      .toBe('/sys/fs/cgroup/memory/process_api/abc');
  });
});
