import { isTerminal } from '../../../protocol/index.js';
import type { EventBus } from '../../events/event-bus.js';
import type { JobRecord } from '../../store/index.js';
import type { GenerationKind } from './requests.js';

/** Where one picture's job is, as its events tell. */
interface JobPlace {
  /** On a host (dispatched, loading its model or running), not waiting in a queue. */
  placed: boolean;
  ended: boolean;
  step: number;
  total: number;
}

/**
 * One txt2img or img2img request's jobs while they are made: what `/sdapi/v1/progress` reports of them, from the jobs'
 * own events (a host's per-step `progress`, and the `preview` pictures the jobs ask for). It follows its jobs until the
 * last has ended — whether or not its client still waits — and then calls `onEnd` and lets go of them.
 */
export class Generation {
  readonly kind: GenerationKind;
  readonly startedAt: number;
  /** A1111's job timestamp: the start, `YYYYMMDDhhmmss` (UTC). */
  readonly timestamp: string;
  /** `/interrupt` or `/skip` cancelled some of its jobs: those are left out of its answer, not failures. */
  interrupted = false;
  skipped = false;
  /** The newest preview of any of its jobs (PNG, base64). */
  preview: string | null = null;
  /** Its jobs, as admitted (who may see them is theirs: album, model, type). */
  readonly records: readonly JobRecord[];
  readonly #jobs = new Map<string, JobPlace>();
  readonly #unsubscribes: (() => void)[] = [];
  readonly #onEnd: (generation: Generation) => void;
  #over = false;

  constructor(kind: GenerationKind, records: readonly JobRecord[], events: EventBus, onEnd: (generation: Generation) => void) {
    this.kind = kind;
    this.records = records;
    this.startedAt = events.clock.now();
    this.timestamp = new Date(this.startedAt).toISOString().replace(/\D/g, '').slice(0, 14);
    this.#onEnd = onEnd;
    for (const record of records) {
      const place: JobPlace = { placed: false, ended: isTerminal(record.status), step: 0, total: 0 };
      this.#jobs.set(record.id, place);
      if (place.ended) continue;
      this.#unsubscribes.push(events.subscribeJob(record.id, ({ event }) => {
        if (event.type === 'dispatched' || event.type === 'loading' || event.type === 'running') place.placed = true;
        else if (event.type === 'progress') Object.assign(place, { placed: true, step: event.step, total: event.total });
        else if (event.type === 'preview') this.preview = event.b64;
        else if (event.type === 'queued') place.placed = false;
        if (isTerminal(record.status) || event.type === 'succeeded' || event.type === 'failed' || event.type === 'cancelled' || event.type === 'expired') {
          place.ended = true;
          this.#settle();
        }
      }));
    }
    this.#settle();
  }

  /** Every job has ended. */
  get over(): boolean {
    return this.#over;
  }

  get jobCount(): number {
    return this.#jobs.size;
  }

  /** Jobs that have ended, however. */
  get endedCount(): number {
    return [...this.#jobs.values()].filter((place) => place.ended).length;
  }

  /** The jobs not ended yet; `placedOnly`: those on a host now (what `/skip` cancels). */
  unfinished(placedOnly = false): string[] {
    return [...this.#jobs].filter(([, place]) => !place.ended && (!placedOnly || place.placed)).map(([id]) => id);
  }

  /** The job being made now: the first on a host that has reported a step, else none. */
  current(): { step: number; total: number } | null {
    const place = [...this.#jobs.values()].find((candidate) => !candidate.ended && candidate.total > 0);
    return place ? { step: place.step, total: place.total } : null;
  }

  /** Its share done, from 0 to 1: ended jobs whole, the others by their steps. */
  done(): number {
    let sum = 0;
    for (const place of this.#jobs.values()) sum += place.ended ? 1 : place.total > 0 ? Math.min(place.step / place.total, 1) : 0;
    return this.#jobs.size === 0 ? 1 : sum / this.#jobs.size;
  }

  #settle(): void {
    if (this.#over || [...this.#jobs.values()].some((place) => !place.ended)) return;
    this.#over = true;
    for (const unsubscribe of this.#unsubscribes.splice(0)) unsubscribe();
    this.#onEnd(this);
  }
}

/** A1111's state of its work (`shared.state.dict()`), as `/progress` answers it. */
export interface ProgressState {
  skipped: boolean;
  interrupted: boolean;
  stopping_generation: boolean;
  job: string;
  job_count: number;
  job_timestamp: string;
  job_no: number;
  sampling_step: number;
  sampling_steps: number;
}

/** `/sdapi/v1/progress`'s answer (A1111's ProgressResponse). */
export interface ProgressAnswer {
  progress: number;
  eta_relative: number;
  state: ProgressState;
  current_image: string | null;
  textinfo: string | null;
}

const IDLE: ProgressState = {
  skipped: false, interrupted: false, stopping_generation: false, job: '', job_count: 0, job_timestamp: '0', job_no: 0, sampling_step: 0, sampling_steps: 0,
};

/**
 * The progress of a caller's generations (all its requests still being made, as one piece of work): A1111's idle
 * answer (progress 0, job_count 0 — what SillyTavern waits for after switching models) when there are none; else the
 * share done, its estimated seconds left (A1111's: time so far / share done − time so far), the job being made and its
 * step, and the newest preview unless `skipImage`.
 */
export function progressOf(generations: readonly Generation[], now: number, skipImage: boolean): ProgressAnswer {
  if (generations.length === 0) return { progress: 0, eta_relative: 0, state: { ...IDLE }, current_image: null, textinfo: null };
  const count = generations.reduce((sum, generation) => sum + generation.jobCount, 0);
  const ended = generations.reduce((sum, generation) => sum + generation.endedCount, 0);
  const progress = Math.min(generations.reduce((sum, generation) => sum + generation.done() * generation.jobCount, 0) / Math.max(count, 1), 1);
  const first = generations[0]!;
  const elapsed = Math.max(now - Math.min(...generations.map((generation) => generation.startedAt)), 0) / 1000;
  const current = generations.map((generation) => generation.current()).find((step) => step !== null) ?? null;
  const preview = skipImage ? null : generations.map((generation) => generation.preview).findLast((picture) => picture !== null) ?? null;
  return {
    progress,
    eta_relative: progress > 0 ? elapsed / progress - elapsed : 0,
    state: {
      skipped: generations.some((generation) => generation.skipped),
      interrupted: generations.some((generation) => generation.interrupted),
      stopping_generation: false,
      job: `scripts_${first.kind}`,
      job_count: count,
      job_timestamp: first.timestamp,
      job_no: Math.min(ended, count - 1),
      sampling_step: current?.step ?? 0,
      sampling_steps: current?.total ?? 0,
    },
    current_image: preview,
    textinfo: `${ended} of ${count} picture${count === 1 ? '' : 's'} made${current ? `; the next at step ${current.step} of ${current.total}` : ''}`,
  };
}
