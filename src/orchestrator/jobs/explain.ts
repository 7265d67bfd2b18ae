import type { ExplainView, WaitingFor } from '../../protocol/api/index.js';
import type { HostAway } from '../../protocol/index.js';
import type { Clock } from '../../protocol/clock.js';
import type { RegisteredModel } from '../registry/index.js';
import { needsOf, unavailableFor, type HostInfo, type RouteDecision, type Router } from '../routing/index.js';
import type { Scheduler } from '../scheduler/index.js';
import type { JobRecord, MeshStore } from '../store/index.js';
import type { Failover } from './failover.js';
import type { JobSources } from './sources.js';
import { jobView } from './views.js';

export interface JobExplainerDeps {
  store: MeshStore;
  clock: Clock;
  scheduler: Scheduler;
  router: Router;
  failover: Failover;
  model(name: string): RegisteredModel | undefined;
  /** What a host said of itself (connected or departed): why it cannot serve a class it was meant to. */
  hostInfo?(id: string): HostInfo | undefined;
  /** Why a linked host takes no work now (its owner, its hours, its heat), or null. */
  hostAway?(id: string): HostAway | null;
  /** When a sleeping host was last sent a Wake-on-LAN packet, or null. */
  hostWokenAt?(id: string): number | null;
  /** The jobs a waiting job waits for, and where each stands. */
  sources?: Pick<JobSources, 'sourcesOf'>;
}

const AWAY_SKIPS: ReadonlySet<string> = new Set(['yielded', 'out of hours', 'too hot', 'asleep']);

const iso = (ms: number | null): string | null => (ms === null ? null : new Date(ms).toISOString());

/**
 * `gpumesh explain`: where a job went and why — each attempt with the routing
 * decision that sent it (the host chosen and every host passed over, with its
 * reason) — or, for a queued job, why it is still waiting: its place in its
 * model's queue, what it waits for (a retry backoff, a batch to fill, a free
 * slot, a host of its classes, its turn), and every host with what keeps it
 * from taking the job now, asked of the router as if it were routing now.
 */
export class JobExplainer {
  readonly #deps: JobExplainerDeps;

  constructor(deps: JobExplainerDeps) {
    this.#deps = deps;
  }

  async explain(job: JobRecord): Promise<ExplainView> {
    const attempts = (await jobView(this.#deps.store, job)).attempts.map((attempt) => ({
      n: attempt.n, host: attempt.host, status: attempt.status, error: attempt.error, route: attempt.route,
    }));
    const base = { id: job.id, status: job.status, model: job.model, classes: job.classes, hosts: job.hosts, attempts };
    if (job.status === 'waiting') {
      const sources = await this.#deps.sources?.sourcesOf(job) ?? [];
      const detail = `${sources.map((source) => `job ${source.id} (${source.status})`).join(', ')} to succeed; it then runs by its own type, on ${job.classes.join(' → ')}`;
      if (job.status === 'waiting') {
        return {
          ...base, summary: `waiting for its source jobs: ${detail}`,
          waiting: { for: 'its source jobs', detail, position: null, batch: null, retryAt: null, hosts: [], unlisted: {} },
        };
      }
    }
    // Read the job's state after the attempts: the await may have let it move on, and a queued job is explained as it is now.
    if (job.status !== 'queued') return { ...base, summary: this.#summary(job, attempts.length), waiting: null };
    const waiting = this.#waiting(job);
    return { ...base, summary: `waiting for ${waiting.for}: ${waiting.detail}`, waiting };
  }

  #summary(job: JobRecord, attempts: number): string {
    const tries = `${attempts} attempt${attempts === 1 ? '' : 's'}`;
    switch (job.status) {
      case 'dispatched': return `sent to ${job.leaseHost ?? '?'} (attempt ${job.attempts}); waiting for it to start`;
      case 'running': return `running on ${job.leaseHost ?? '?'} (attempt ${job.attempts})`;
      case 'succeeded': return `succeeded after ${tries}`;
      case 'failed': return `failed after ${tries}: ${job.errorCode ?? '?'}: ${job.errorMessage ?? ''}`;
      default: return `${job.status} after ${tries}`;
    }
  }

  #waiting(job: JobRecord): NonNullable<ExplainView['waiting']> {
    const { clock, scheduler, router, failover } = this.#deps;
    const now = clock.now();
    const model = this.#deps.model(job.model);
    const decision: RouteDecision | null = model ? router.route(model, { classes: job.classes, hosts: job.hosts, avoid: failover.failedOn(job.id), workflow: needsOf(job.input) }) : null;
    // Hosts in the order of the job's classes (the order routing tries them), those of no class of it last.
    const rank = (klass: string | null): number => (klass === null ? job.classes.length : job.classes.indexOf(klass));
    const skipped = decision ? [...decision.skipped].sort((a, b) => rank(a.class) - rank(b.class)) : [];
    /** What the host said about a class it cannot serve (no ffmpeg), for `class unavailable`. */
    const detail = (host: string, reason: string): string | null => {
      if (AWAY_SKIPS.has(reason)) {
        const away = this.#deps.hostAway?.(host);
        if (!away) return null;
        return away.until === null ? away.reason : `${away.reason}; back by ${iso(away.until)}`;
      }
      if (reason !== 'class unavailable') return null;
      const info = this.#deps.hostInfo?.(host);
      const entry = info ? unavailableFor(info, job.classes) : null;
      return entry ? `${entry.class}: ${entry.reason}` : null;
    };
    const hosts = [
      ...(decision?.host ? [{ host: decision.host.id, class: decision.class, canTake: true, reason: null, detail: null }] : []),
      ...skipped.map((skip) => ({ host: skip.host, class: skip.class, canTake: false, reason: skip.reason, detail: detail(skip.host, skip.reason) })),
    ];
    const retryAt = failover.retryAt(job.id);
    const standing = scheduler.standing(job.model, job.id, now);
    const position = standing ? { ahead: standing.ahead, queued: standing.queued } : null;
    const batch = standing ? { size: standing.group.size, target: standing.group.target, releaseBy: iso(standing.releaseAt) } : null;
    const unlisted = decision?.unlisted ?? {};
    const result = (waitingFor: WaitingFor, detail: string) => ({ for: waitingFor, detail, position, batch, retryAt: iso(retryAt), hosts, unlisted });

    if (retryAt !== null) return result('retry backoff', `attempt ${job.attempts} failed (${job.errorCode ?? 'see attempts'}); back in the queue in ${Math.max(0, retryAt - now)} ms`);
    if (!model || !decision) return result('a host of its classes', `model ${job.model} is no longer in the registry`);
    const blockers = skipped.filter((skip) => !['busier', 'not sampled', 'not resident', 'failed this job'].includes(skip.reason));
    const why = blockers.map((skip) => {
      const more = detail(skip.host, skip.reason);
      if (!more) return `${skip.host}: ${skip.reason}`;
      return `${skip.host}: ${skip.reason === 'class unavailable' ? `cannot serve ${more}` : `${skip.reason} (${more})`}`;
    }).join('; ');
    if (standing && (!standing.ready || (standing.early && decision.host !== null && decision.host.computing > 0))) {
      const by = standing.releaseAt === null ? '' : `; it leaves by ${iso(standing.releaseAt)} whatever the size`;
      return result('a batch to fill', `${standing.group.size} of ${standing.group.target} compatible jobs queued${by}`);
    }
    if (decision.waitingFor === 'a host of its classes') {
      // Sleeping hosts of its classes that were sent a Wake-on-LAN packet for it.
      const waking = skipped.filter((skip) => skip.reason === 'disconnected').flatMap((skip) => {
        const at = this.#deps.hostWokenAt?.(skip.host) ?? null;
        return at === null ? [] : [`waking ${skip.host}, packet sent ${new Date(at).toISOString().slice(11, 16)} UTC`];
      });
      return result('a host of its classes', `no usable host serves ${job.classes.join(' or ')}${why ? ` (${why})` : ''}${waking.length ? `; ${waking.join('; ')}` : ''}`);
    }
    if (decision.waitingFor === 'a free slot') {
      return result('a free slot', `every usable host of class ${decision.class ?? '?'} is busy${why ? ` (${why})` : ''}`);
    }
    const swap = decision.host ? scheduler.swapHold(job.model, job.id, decision.host, now) : null;
    if (swap) {
      return result('a model swap', `${swap.host} holds ${swap.keeping.join(', ')} (no room for ${job.model} beside it) and sends the batches ready for it first; `
        + `${job.model} is swapped in when they are done, by ${iso(swap.until)} at the latest`);
    }
    const ahead = standing?.ahead ?? 0;
    return result('its turn', `${decision.host!.id} can take it now; ${ahead} job${ahead === 1 ? '' : 's'} of ${job.model} ahead of it`);
  }
}
