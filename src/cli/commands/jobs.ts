import { Command } from 'commander';
import type { JobPage, JobView, RemovedResults, WebhookDeliveries } from '../../protocol/api/index.js';
import { clientFrom, type ClientOptions } from '../common/settings.js';
import { parseInteger, printJson, table } from '../common/output.js';
import { askEach, withClientOptions } from './shared.js';

export function jobsCommand(): Command {
  const jobs = new Command('jobs').description('List, inspect and cancel jobs, and delete their results');
  withClientOptions(jobs.command('list', { isDefault: true }))
    .description('Jobs newest first')
    .option('--status <status>', 'only jobs in this state')
    .option('--limit <n>', 'how many', parseInteger('--limit'), 20)
    .option('--json', 'print JSON')
    .action(async (options: ClientOptions & { status?: string; limit: number; json?: boolean }) => {
      const query = new URLSearchParams({ limit: String(options.limit) });
      if (options.status) query.set('status', options.status);
      const page = await clientFrom(options).request<JobPage>('GET', `/v1/jobs?${query}`);
      if (options.json) return printJson(page);
      process.stdout.write(`${table(['ID', 'TYPE', 'MODEL', 'STATUS', 'CREATED', 'BATCH'], page.jobs.map((job) => [
        job.id, job.type, job.model, job.status, job.createdAt, job.batch ? `${job.batch.size}` : '-',
      ]))}\n`);
    });
  withClientOptions(jobs.command('get <id>'))
    .description('One job as JSON: status, attempts, artifacts')
    .action(async (id: string, options: ClientOptions) => printJson(await clientFrom(options).job(id)));
  withClientOptions(jobs.command('show <id>'))
    .description('One job in words: its status, where it ran, its results, and the deliveries of its end to its callback URL (status, attempts, last error, next try)')
    .option('--json', 'print JSON: {job, webhooks}')
    .action(async (id: string, options: ClientOptions & { json?: boolean }) => {
      const client = clientFrom(options);
      const [job, hooks] = await Promise.all([
        client.job(id),
        client.request<WebhookDeliveries>('GET', `/v1/jobs/${encodeURIComponent(id)}/webhooks`),
      ]);
      if (options.json) return printJson({ job, webhooks: hooks.deliveries });
      process.stdout.write(`${showLines(job, hooks).join('\n')}\n`);
    });
  withClientOptions(jobs.command('cancel <id>'))
    .description('Cancel a queued or running job')
    .action(async (id: string, options: ClientOptions) => {
      const job = await clientFrom(options).request<JobView>('DELETE', `/v1/jobs/${encodeURIComponent(id)}`);
      process.stdout.write(`${job.id} ${job.status}\n`);
    });
  askEach(
    withClientOptions(jobs.command('delete-results <id...>'))
      .description("Delete jobs' published results, as the gallery's Delete does; their bytes leave the store once nothing else names them"),
    'job', (client, id) => client.request<RemovedResults>('DELETE', `/v1/jobs/${encodeURIComponent(id)}/artifacts`), removedLine,
  );
  return jobs;
}

/** `jobs show`: the job, then its callbacks. */
export function showLines(job: JobView, hooks: WebhookDeliveries): string[] {
  const last = job.attempts.at(-1);
  const lines = [
    `job       ${job.id}`,
    `status    ${job.status}${job.error ? ` (${job.error.code}: ${job.error.message})` : ''}`,
    `type      ${job.type} on ${job.model}, album ${job.album}, priority ${job.priority}`,
    `created   ${job.createdAt}${job.finishedAt ? `, finished ${job.finishedAt}` : ''}`,
    `ran on    ${last ? `${last.host} (attempt ${last.n})` : '-'}`,
    ...job.artifacts.map((artifact) => `result    ${artifact.url} ${artifact.mediaType} ${artifact.bytes} bytes`),
  ];
  if (hooks.deliveries.length === 0) lines.push('webhooks  none');
  for (const delivery of hooks.deliveries) {
    const next = delivery.nextAttemptAt ? `, next try ${delivery.nextAttemptAt}` : '';
    const error = delivery.lastError ? `, last error: ${delivery.lastError}` : '';
    lines.push(`webhook   ${delivery.id} ${delivery.event} → ${delivery.url}: ${delivery.status} after ${delivery.attempts} ${delivery.attempts === 1 ? 'try' : 'tries'}${delivery.lastStatus !== null ? ` (last answer ${delivery.lastStatus})` : ''}${next}${error}`);
  }
  return lines;
}

/** `j_… 2 results deleted, 1 freed (184,320 bytes); 1 still named elsewhere`. */
export function removedLine({ jobId, deleted, freed, freedBytes }: RemovedResults): string {
  if (deleted.length === 0) return `${jobId} had no results to delete`;
  const kept = deleted.length - freed.length;
  return `${jobId} ${deleted.length} ${deleted.length === 1 ? 'result' : 'results'} deleted, ${freed.length} freed (${freedBytes.toLocaleString('en')} bytes)`
    + (kept > 0 ? `; ${kept} still named elsewhere (another result, a client's file or a job's input: same bytes)` : '');
}
