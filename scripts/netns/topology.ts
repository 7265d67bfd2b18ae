import { execFile } from 'node:child_process';
import { promisify } from 'node:util';

const run = promisify(execFile);

/** One host of the run: its namespace and its address on the bridge. */
export interface NetnsHost {
  name: string;
  namespace: string;
  address: string;
}

/**
 * The namespaces `scripts/netns-mesh.sh` built for this run, as it describes them in the environment
 * (GPUMESH_NETNS_RUN, _SWITCH, _HOSTS "name=address …", _WORK). The script owns them: it made them and removes
 * them, and every process in them, when the driver ends. The driver runs in the first host's namespace.
 */
export class Topology {
  readonly run: string;
  readonly work: string;
  readonly hosts: readonly NetnsHost[];
  readonly #switch: string;

  private constructor(run: string, switchNamespace: string, hosts: NetnsHost[], work: string) {
    this.run = run;
    this.#switch = switchNamespace;
    this.hosts = hosts;
    this.work = work;
  }

  static fromEnv(env: NodeJS.ProcessEnv = process.env): Topology {
    const { GPUMESH_NETNS_RUN: run, GPUMESH_NETNS_SWITCH: sw, GPUMESH_NETNS_HOSTS: list, GPUMESH_NETNS_WORK: work } = env;
    if (!run || !sw || !list || !work) {
      throw new Error('no namespaces described in the environment: run this through scripts/netns-mesh.sh (as root)');
    }
    const hosts = list.split(' ').filter(Boolean).map((entry) => {
      const [name, address] = entry.split('=');
      if (!name || !address) throw new Error(`GPUMESH_NETNS_HOSTS: "${entry}" is not name=address`);
      return { name, address, namespace: `${run}-${name}` };
    });
    return new Topology(run, sw, hosts, work);
  }

  host(name: string): NetnsHost {
    const host = this.hosts.find((entry) => entry.name === name);
    if (!host) throw new Error(`no host "${name}" in this run (hosts: ${this.hosts.map((entry) => entry.name).join(', ')})`);
    return host;
  }

  /** argv that runs `argv` inside the host's namespace. */
  command(name: string, argv: readonly string[]): string[] {
    return ['ip', 'netns', 'exec', this.host(name).namespace, ...argv];
  }

  /**
   * Cut the host off: its bridge port goes down, so every packet to and from it is dropped on the way with no
   * reset or close — a pulled cable or a dead Wi-Fi. Its processes keep running and see nothing but silence.
   */
  async cut(name: string): Promise<void> {
    await this.#port(name, 'down');
  }

  async restore(name: string): Promise<void> {
    await this.#port(name, 'up');
  }

  async #port(name: string, state: 'up' | 'down'): Promise<void> {
    this.host(name);
    await run('ip', ['netns', 'exec', this.#switch, 'ip', 'link', 'set', `p-${name}`, state]);
  }
}
