import { MeshError } from '../../protocol/index.js';
import { unavailableFor } from './host.js';
import type { HostRegistry } from './hosts.js';

/**
 * Refuses, at submit, a job that no host could ever take: no host — connected, or one that left and may come
 * back — serves any of its classes, and some host says it was meant to and cannot (`video` on a host without
 * ffmpeg). Such a job would otherwise sit in its queue until its deadline while every screen said it was queued.
 * A mesh with no word on the class at all (no host of it has joined yet) still queues the job: a host may join.
 */
export class ClassAvailability {
  readonly #hosts: HostRegistry;

  constructor(hosts: HostRegistry) {
    this.#hosts = hosts;
  }

  /** Throws CLASS_UNAVAILABLE for a job of `type` that may run on `classes` when none can be served (see above). */
  admit(type: string, classes: readonly string[]): void {
    // The common case costs a count over the handful of distinct class lists, not a walk over the hosts.
    if (this.#hosts.countServing(classes) > 0) return;
    const unable: string[] = [];
    for (const departed of this.#hosts.departed()) {
      if (departed.info.classes.some((name) => classes.includes(name))) return;
      const entry = unavailableFor(departed.info, classes);
      if (entry) unable.push(`${departed.info.id} (not connected): ${entry.class}: ${entry.reason}`);
    }
    for (const host of this.#hosts) {
      const entry = unavailableFor(host.info, classes);
      if (entry) unable.push(`${host.id}: ${entry.class}: ${entry.reason}`);
    }
    if (unable.length === 0) return;
    throw new MeshError('CLASS_UNAVAILABLE', { type, classes: classes.join(' or '), detail: unable.join('; ') });
  }
}
