import type { Logger } from 'pino';
import { MeshError, type AgentMessage } from '../../protocol/index.js';
import type { Clock, Timer } from '../../protocol/clock.js';
import { newId } from '../store/ids.js';
import type { RegisteredModel } from '../registry/index.js';
import type { BreakerBoard } from './breakers.js';
import type { AttemptBudgets } from './budgets.js';
import type { HealthBook } from './health.js';
import type { HostSession } from './host.js';
import type { HostRegistry } from './hosts.js';
import { keepNewest } from '../../protocol/bounded.js';
import { runMessage, type MintUploadCredential } from './run-message.js';

/** A report the link carries about a batch: a probe's are the prober's. */
export type BatchReport = Extract<AgentMessage, { type: 'loading' | 'started' | 'progress' | 'done' | 'failed' }>;

export type ProbeOutcome = 'ok' | 'failed' | 'timeout' | 'lost' | 'inconclusive';

/** How often the prober looks for replicas due a probe and breakers waiting for a trial. */
export const PROBE_SWEEP_MS = 1000;
/**
 * Scheduled probes stop once a replica has had no real work for this many intervals: each probe counts as use on the
 * agent, so probing an idle model for ever would keep it from unloading (scale to zero).
 */
export const PROBE_IDLE_INTERVALS = 4;
/** An unhealthy replica is probed again after this share of the interval. */
const UNHEALTHY_RETRY_SHARE = 0.25;
/** Finished probes remembered, so a late report about one is acknowledged quietly rather than refused. */
const RECENT_LIMIT = 1024;

export interface ProberDeps {
  clock: Clock;
  hosts: HostRegistry;
  breakers: BreakerBoard;
  health: HealthBook;
  budgets: AttemptBudgets;
  models(): Iterable<RegisteredModel>;
  model(name: string): RegisteredModel | undefined;
  uploadCredential: MintUploadCredential;
  /** Probe each resident model that has had nothing succeed for this long; 0: only breaker trials. */
  intervalMs: number;
  log: Logger;
  /** Each finished probe (metrics). */
  onProbed?(host: string, model: string, outcome: ProbeOutcome): void;
}

interface Probe {
  batchId: string;
  jobId: string;
  host: HostSession;
  model: string;
  timer: Timer;
  /** A half-open breaker's trial (else a scheduled health probe). */
  trial: boolean;
}

/**
 * Active health checks. A probe is a `run` of one job with the model
 * job type's probe input, marked `probe`, sent like any batch and taking a
 * slot while it runs; its reports are claimed here before the job roles see
 * them. Each resident model that has had nothing succeed for `intervalMs`
 * is probed when its host has a free slot (real work that succeeds is
 * evidence enough, so a busy replica is not probed) — until it has had no
 * real work for `PROBE_IDLE_INTERVALS` intervals, so an idle model can unload. A half-open breaker's
 * trial is a probe too, sent as soon as the host has a slot, so no client job
 * is risked on a replica that just failed. A probe that fails or outlives its
 * budget marks the replica unhealthy and counts against its breaker; one that
 * succeeds marks it healthy and counts for it.
 *
 * What the agent must do: run the batch as any other (make the model
 * resident, `started`, the engine, `done`/`failed` with timings) and, seeing
 * `probe`, deliver no outputs (`done` with no artifacts).
 */
export class Prober {
  readonly #deps: ProberDeps;
  readonly #probes = new Map<string, Probe>();
  readonly #recent = new Set<string>();
  /** When each resident replica was first seen resident, so a freshly loaded model is not probed at once. */
  readonly #residentSince = new Map<string, number>();
  #sweep: Timer | null = null;
  #sweepQueued = false;
  #closed = false;

  constructor(deps: ProberDeps) {
    this.#deps = deps;
    deps.breakers.onChange((change) => {
      if (change.to === 'half-open') this.requestSweep();
    });
    deps.hosts.onChange(() => this.requestSweep());
    this.#armSweep();
  }

  /** Coalesce triggers (a breaker half-opened, a slot freed, a host joined) into one sweep. */
  requestSweep(): void {
    if (this.#sweepQueued || this.#closed) return;
    this.#sweepQueued = true;
    queueMicrotask(() => {
      this.#sweepQueued = false;
      this.sweep();
    });
  }

  /** Send the probes that are due: trials of half-open breakers first, then scheduled ones. */
  sweep(): void {
    if (this.#closed) return;
    const { hosts, breakers, health, clock, intervalMs } = this.#deps;
    for (const { host: id, model } of breakers.halfOpen()) {
      const host = hosts.get(id);
      if (!host || !host.takesWork || host.freeSlots === 0 || this.#probing(id, model)) continue;
      const target = model === null ? this.#anyModelFor(host) : this.#deps.model(model);
      if (target) this.#send(host, target, true);
    }
    if (intervalMs <= 0) return;
    const now = clock.now();
    for (const host of hosts) {
      for (const resident of host.resident) {
        const key = `${host.id}\u0000${resident.model}`;
        if (!this.#residentSince.has(key)) this.#residentSince.set(key, now);
        if (!host.takesWork || host.freeSlots === 0 || this.#probing(host.id, resident.model)) continue;
        if (breakers.blocking(host.id, resident.model)) continue; // open: it waits; half-open: its trial is sent above
        const replica = health.replica(host.id, resident.model);
        const since = this.#residentSince.get(key)!;
        if (now - Math.max(replica.lastWorkAt ?? -Infinity, since) > PROBE_IDLE_INTERVALS * intervalMs) continue; // idle: let it unload
        const last = Math.max(replica.lastGoodAt ?? -Infinity, replica.lastProbeAt ?? -Infinity, since);
        const due = replica.state === 'unhealthy' ? intervalMs * UNHEALTHY_RETRY_SHARE : intervalMs;
        const model = this.#deps.model(resident.model);
        if (model && now - last >= due) this.#send(host, model, false);
      }
    }
  }

  /** Take a report about a probe; false when the batch is not a probe (the job roles take it). */
  claims(host: HostSession, message: BatchReport): boolean {
    const probe = this.#probes.get(message.batchId);
    if (!probe) {
      if (!this.#recent.has(message.batchId)) return false;
      if (message.type === 'done' || message.type === 'failed') host.ack(message.jobId);
      return true;
    }
    if (message.type === 'loading' || message.type === 'started' || message.type === 'progress') return true;
    host.ack(message.jobId);
    if (probe.host !== host) return true; // another session of the host: the probe is settled when its own session goes
    if (message.type === 'done') {
      this.#finish(probe, 'ok');
    } else if (!message.retryable && message.error.code === 'INVALID_INPUT') {
      // The probe input is at fault (a server that wants other sizes), not the replica: no verdict.
      this.#deps.log.warn({ host: host.id, model: probe.model, error: message.error }, 'the model refused its probe input; set params.probeWidth/probeHeight/probeSteps');
      this.#finish(probe, 'inconclusive');
    } else {
      this.#finish(probe, 'failed', `${message.error.code}: ${message.error.message}`);
    }
    return true;
  }

  /** A host session ended: its probes end with it, without a verdict (the link breaker counts the loss). */
  hostLost(host: HostSession): void {
    for (const probe of [...this.#probes.values()]) if (probe.host === host) this.#finish(probe, 'lost');
  }

  close(): void {
    this.#closed = true;
    this.#sweep?.cancel();
    for (const probe of this.#probes.values()) probe.timer.cancel();
    this.#probes.clear();
  }

  #probing(host: string, model: string | null): boolean {
    for (const probe of this.#probes.values()) if (probe.host.id === host && (model === null || probe.model === model)) return true;
    return false;
  }

  /** For the host's own breaker: a resident model, else any it can run. */
  #anyModelFor(host: HostSession): RegisteredModel | undefined {
    const runnable = [...this.#deps.models()].filter((model) => host.info.engines.includes(model.manifest.engine) && host.largestBudgetMB >= model.manifest.memoryMB);
    return runnable.find((model) => host.isResident(model.manifest.name)) ?? runnable[0];
  }

  #send(host: HostSession, model: RegisteredModel, trial: boolean): void {
    const { clock, budgets, log } = this.#deps;
    const now = clock.now();
    const batchId = newId('p');
    const jobId = newId('probe');
    const name = model.manifest.name;
    const budget = budgets.probe(host.id, model, host.isResident(name));
    const probe: Probe = {
      batchId, jobId, host, model: name, trial,
      timer: clock.setTimer(budget.ms, () => {
        host.send({ type: 'cancel', jobId });
        this.#finish(probe, 'timeout', new MeshError('AGENT_TIMEOUT', { host: host.id, budgetMs: budget.ms, basis: budget.basis }).message);
      }),
    };
    this.#probes.set(batchId, probe);
    host.probes.set(batchId, now);
    host.send(runMessage({
      batchId, model: model.manifest, probe: true, validUntil: now + budget.ms,
      jobs: [{ id: jobId, input: model.jobInputs.probeInput(model.manifest), deadlineAt: now + budget.ms }],
    }, this.#deps.uploadCredential));
    log.debug({ host: host.id, model: name, batchId, trial }, 'probe sent');
  }

  #finish(probe: Probe, outcome: ProbeOutcome, detail?: string): void {
    const { health, breakers, hosts, log } = this.#deps;
    probe.timer.cancel();
    this.#probes.delete(probe.batchId);
    probe.host.probes.delete(probe.batchId);
    this.#recent.add(probe.batchId);
    keepNewest(this.#recent, RECENT_LIMIT);
    const host = probe.host.id;
    if (outcome === 'ok') {
      health.probed(host, probe.model, true);
      breakers.success(host, probe.model);
    } else if (outcome === 'failed' || outcome === 'timeout') {
      health.probed(host, probe.model, false, detail ?? outcome);
      breakers.failure(host, probe.model, detail ?? outcome);
      log.warn({ host, model: probe.model, trial: probe.trial, detail }, 'probe failed');
    }
    this.#deps.onProbed?.(host, probe.model, outcome);
    // Its slot is free again: queued work (or the next trial) may take it.
    if (hosts.get(host) === probe.host) hosts.changed();
  }

  #armSweep(): void {
    if (this.#closed) return;
    this.#sweep = this.#deps.clock.setTimer(PROBE_SWEEP_MS, () => {
      this.sweep();
      this.#armSweep();
    });
  }
}
