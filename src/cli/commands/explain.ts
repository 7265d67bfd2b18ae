import { Command } from 'commander';
import type { ExplainView, RouteView } from '../../protocol/api/index.js';
import { clientFrom, type ClientOptions } from '../common/settings.js';
import { printJson, table } from '../common/output.js';
import { withClientOptions } from './shared.js';

/** `laptop (image, resident); passed over: desktop (no free slot), cloud (breaker open)`. */
export function routeText(route: RouteView | null): string {
  if (!route) return 'no route recorded';
  const chosen = route.host ? `${route.host} (${route.class ?? '?'}${route.warmth ? `, ${route.warmth}` : ''})` : 'no host';
  const passed = [...route.skipped.map((skip) => `${skip.host} (${skip.reason})`), ...unlistedText(route.unlisted ?? {})].join(', ');
  return passed ? `${chosen}; passed over: ${passed}` : chosen;
}

/** `40 more (no free slot)` for each reason of the hosts a decision counted instead of naming. */
function unlistedText(unlisted: RouteView['unlisted']): string[] {
  return Object.entries(unlisted).map(([reason, count]) => `${count} more (${reason})`);
}

function explainText(view: ExplainView): string {
  const out = [`${view.id}  ${view.status}  ${view.model}`, view.summary, ''];
  out.push(`may run on: classes ${view.classes.join(' → ')}${view.hosts ? `; hosts ${view.hosts.join(', ')}` : ''}`);
  if (view.attempts.length > 0) {
    out.push('', table(['ATTEMPT', 'HOST', 'STATUS', 'ERROR', 'ROUTE'], view.attempts.map((attempt) => [
      String(attempt.n), attempt.host, attempt.status, attempt.error ? `${attempt.error.code}` : '-', routeText(attempt.route),
    ])));
  }
  const waiting = view.waiting;
  if (waiting) {
    out.push('');
    if (waiting.position) out.push(`position: ${waiting.position.ahead} ahead of it, ${waiting.position.queued} queued for ${view.model}`);
    if (waiting.batch) out.push(`batch: ${waiting.batch.size} of ${waiting.batch.target}${waiting.batch.releaseBy ? `, leaves by ${waiting.batch.releaseBy}` : ''}`);
    if (waiting.hosts.length > 0) {
      out.push('', table(['HOST', 'CLASS', 'CAN TAKE IT', 'WHY NOT'], waiting.hosts.map((host) => [
        host.host, host.class ?? '-', host.canTake ? 'yes' : 'no', host.detail ? `${host.reason ?? ''} — ${host.detail}` : host.reason ?? '-',
      ])));
    } else {
      out.push('hosts: none known');
    }
    const more = unlistedText(waiting.unlisted ?? {});
    if (more.length > 0) out.push(`and ${more.join(', ')}`);
  }
  return out.join('\n');
}

export function explainCommand(): Command {
  return withClientOptions(new Command('explain'))
    .description('Where a job went and why (each attempt\'s route), or why it is still waiting (its place in the queue, what it waits for, which hosts could take it)')
    .argument('<job>', 'the job id')
    .option('--json', 'print JSON')
    .action(async (id: string, options: ClientOptions & { json?: boolean }) => {
      const view = await clientFrom(options).request<ExplainView>('GET', `/v1/jobs/${encodeURIComponent(id)}/explain`);
      if (options.json) return printJson(view);
      process.stdout.write(`${explainText(view)}\n`);
    });
}
