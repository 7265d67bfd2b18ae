import type { FastifyRequest } from 'fastify';
import { z } from 'zod';
import { isTerminal, MeshError, type JobStatus } from '../../../protocol/index.js';
import { grantOf } from '../auth.js';
import { jsonOf } from './prompts.js';
import { promptFields } from './outputs.js';
import type { PromptEntry } from './prompt-book.js';
import type { ComfyDoorDeps } from './routes.js';

/** A prompt being computed now, as ComfyUI's `queue_running` counts it (sent to its host, or running there). */
const RUNNING: ReadonlySet<JobStatus> = new Set(['dispatched', 'running']);

/** A queue entry as ComfyUI lists it: `[number, prompt_id, prompt, extra_data, outputs_to_execute]`. */
const queueEntry = ({ promptId, job }: PromptEntry): unknown[] => [job.seq, promptId, job.input.workflow, promptFields(job.input).extraData, []];

/** `GET /queue`: the lineage's prompts still to end, running and waiting, oldest first. */
export function queueOf(request: FastifyRequest, deps: Pick<ComfyDoorDeps, 'book'>): { queue_running: unknown[][]; queue_pending: unknown[][] } {
  const open = deps.book.entries(grantOf(request).id).filter((entry) => !isTerminal(entry.job.status));
  return {
    queue_running: open.filter((entry) => RUNNING.has(entry.job.status)).map(queueEntry),
    queue_pending: open.filter((entry) => !RUNNING.has(entry.job.status)).map(queueEntry),
  };
}

/** Cancel a prompt's job; one that has ended meanwhile is left as it is (ComfyUI answers 200 whatever it found). */
async function cancel(request: FastifyRequest, entry: PromptEntry, deps: Pick<ComfyDoorDeps, 'cancels' | 'auth'>): Promise<void> {
  try {
    await deps.cancels.cancel(grantOf(request), entry.job.id, deps.auth.authorizer(request));
  } catch (error) {
    if (!(error instanceof MeshError && (error.code === 'JOB_NOT_CANCELLABLE' || error.code === 'NOT_FOUND'))) throw error;
  }
}

const QueueChange = z.looseObject({ clear: z.boolean().optional(), delete: z.array(z.string().max(200)).max(1000).optional() });

/** `POST /queue {clear}` or `{delete: [prompt ids]}`: prompts that wait (not those running) are taken out, as ComfyUI does. */
export async function changeQueue(request: FastifyRequest, deps: Pick<ComfyDoorDeps, 'book' | 'cancels' | 'auth'>): Promise<void> {
  const parsed = QueueChange.safeParse(jsonOf(request.body));
  if (!parsed.success) throw new MeshError('VALIDATION_FAILED', { detail: parsed.error.issues.map((issue) => `${issue.path.join('.') || 'body'}: ${issue.message}`).join('; ') });
  const deleting = new Set(parsed.data.delete ?? []);
  const waiting = deps.book.entries(grantOf(request).id).filter((entry) => !isTerminal(entry.job.status) && !RUNNING.has(entry.job.status));
  for (const entry of waiting) if (parsed.data.clear === true || deleting.has(entry.promptId)) await cancel(request, entry, deps);
}

const Interrupt = z.looseObject({ prompt_id: z.string().max(200).optional() });

/** `POST /interrupt`, with a `prompt_id` (that prompt, if it runs) or without (the lineage's running prompts). */
export async function interrupt(request: FastifyRequest, deps: Pick<ComfyDoorDeps, 'book' | 'cancels' | 'auth'>): Promise<void> {
  const parsed = Interrupt.safeParse(jsonOf(request.body));
  const target = parsed.success ? parsed.data.prompt_id : undefined;
  const running = deps.book.entries(grantOf(request).id).filter((entry) => RUNNING.has(entry.job.status) && (target === undefined || entry.promptId === target));
  for (const entry of running) await cancel(request, entry, deps);
}
