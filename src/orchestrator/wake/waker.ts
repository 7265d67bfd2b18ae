import type { Logger } from 'pino';
import type { Clock, Timer } from '../../protocol/clock.js';
import type { DepartedHost, HostRegistry } from '../routing/index.js';

export interface WakeSettings {
  /** Where magic packets go: a broadcast address of the hosts' network (default 255.255.255.255), and the port (9). */
  broadcast: string;
  port: number;
  /** A sleeping host is sent a packet at most this often while work waits for it. */
  everyMs: number;
  /** After this long without it coming, it is not woken again until work waits for it afresh. */
  giveUpAfterMs: number;
  /** Only hosts seen within this long are woken (one gone for weeks is not asleep). */
  recentMs: number;
}

export interface WakerDeps {
  clock: Clock;
  log: Logger;
  hosts: HostRegistry;
  settings: WakeSettings;
  /** The routing classes that queued work waits for and no connected host that takes work serves; empty when none. */
  waitingClasses(): ReadonlySet<string>;
  send(macs: readonly string[], address: string, port: number): Promise<void>;
  /** A packet went to a host (the mesh event, the audit log). */
  woke(host: string, at: number): void;
}

/** How often the Waker looks for work waiting on sleeping hosts. */
const LOOK_EVERY_MS = 2000;

/**
 * Wake-on-LAN: when jobs wait for a class that only sleeping hosts serve — known, recently seen, not connected, and
 * with MAC addresses they announced — send each a magic packet, at most every `everyMs`, for up to `giveUpAfterMs`;
 * the jobs wait as they would for any host, and fail over as usual once one of their classes has a host again.
 */
export class Waker {
  readonly #deps: WakerDeps;
  /** Per host: when the current episode of waking it began, and when its last packet went. */
  readonly #waking = new Map<string, { since: number; lastAt: number }>();
  #timer: Timer | null = null;
  #closed = false;

  constructor(deps: WakerDeps) {
    this.#deps = deps;
    this.#arm();
  }

  /** When the last packet went to a host, or null. */
  wokenAt(host: string): number | null {
    return this.#waking.get(host)?.lastAt ?? null;
  }

  close(): void {
    this.#closed = true;
    this.#timer?.cancel();
  }

  #arm(): void {
    if (this.#closed) return;
    this.#timer = this.#deps.clock.setTimer(LOOK_EVERY_MS, () => {
      void this.look().finally(() => this.#arm());
    });
  }

  /** One look: wake what the waiting work needs. */
  async look(): Promise<void> {
    const { clock, hosts, settings } = this.#deps;
    const now = clock.now();
    const classes = this.#deps.waitingClasses();
    const wanted = new Set<string>();
    for (const departed of hosts.departed()) {
      if (!this.#wakeable(departed, now) || !departed.info.classes.some((klass) => classes.has(klass))) continue;
      wanted.add(departed.info.id);
      const episode = this.#waking.get(departed.info.id) ?? { since: now, lastAt: -Infinity };
      if (now - episode.since > settings.giveUpAfterMs || now - episode.lastAt < settings.everyMs) continue;
      episode.lastAt = now;
      this.#waking.set(departed.info.id, episode);
      try {
        await this.#deps.send(departed.info.macs!, settings.broadcast, settings.port);
        this.#deps.log.info({ host: departed.info.id, macs: departed.info.macs, to: `${settings.broadcast}:${settings.port}` }, 'work waits for a sleeping host: sent it a Wake-on-LAN packet');
        this.#deps.woke(departed.info.id, now);
      } catch (error) {
        this.#deps.log.warn({ err: error, host: departed.info.id }, 'could not send a Wake-on-LAN packet');
      }
    }
    // A host no work waits for any more (or that came back) starts a fresh episode next time.
    for (const host of this.#waking.keys()) if (!wanted.has(host)) this.#waking.delete(host);
  }

  #wakeable(host: DepartedHost, now: number): boolean {
    return (host.info.macs?.length ?? 0) > 0 && now - host.lastSeenAt <= this.#deps.settings.recentMs;
  }
}
