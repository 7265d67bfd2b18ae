import { DELIVERY_COLUMNS, deliveryFromRow, deliveryValues, tryValues, type DeliveryRow, type WebhookTable } from '../contract/webhooks.js';
import { marks, type PgAccess } from './access.js';

/** The job_webhooks, pipeline_webhooks and webhook_deliveries tables in PostgreSQL. */
export function webhookTable({ write, read }: PgAccess): WebhookTable {
  return {
    armJob: (jobId, url, now) => write(
      'INSERT INTO job_webhooks (job_id, url, created_at) VALUES ($1, $2, $3) ON CONFLICT (job_id) DO UPDATE SET url = EXCLUDED.url, created_at = EXCLUDED.created_at',
      [jobId, url, now],
    ),
    disarmJob: (jobId) => write('DELETE FROM job_webhooks WHERE job_id = $1', [jobId]),
    armedJobs: async () => (await read<{ job_id: string; url: string }>('SELECT job_id, url FROM job_webhooks ORDER BY created_at')).map((row) => ({ jobId: row.job_id, url: row.url })),
    armPipeline: (pipelineId, url, now) => write(
      'INSERT INTO pipeline_webhooks (pipeline_id, url, created_at) VALUES ($1, $2, $3) ON CONFLICT (pipeline_id) DO UPDATE SET url = EXCLUDED.url, created_at = EXCLUDED.created_at',
      [pipelineId, url, now],
    ),
    disarmPipeline: (pipelineId) => write('DELETE FROM pipeline_webhooks WHERE pipeline_id = $1', [pipelineId]),
    armedPipelines: async () => (await read<{ pipeline_id: string; url: string }>('SELECT pipeline_id, url FROM pipeline_webhooks ORDER BY created_at'))
      .map((row) => ({ pipelineId: row.pipeline_id, url: row.url })),
    insertDelivery: (record) => write(`INSERT INTO webhook_deliveries (${DELIVERY_COLUMNS}) VALUES (${marks(14)})`, deliveryValues(record)),
    updateDelivery: (id, outcome) => write(
      `UPDATE webhook_deliveries SET status = $1, attempts = $2, last_status = $3, last_error = $4, next_at = $5, tried_at = $6, finished_at = $7
        WHERE id = $8`,
      tryValues(id, outcome),
    ),
    pendingDeliveries: async () => (await read<DeliveryRow>(`SELECT ${DELIVERY_COLUMNS} FROM webhook_deliveries WHERE status = 'pending' ORDER BY created_at`)).map(deliveryFromRow),
    deliveriesOf: async (subjectId) => (await read<DeliveryRow>(`SELECT ${DELIVERY_COLUMNS} FROM webhook_deliveries WHERE subject_id = $1 ORDER BY created_at, id`, [subjectId])).map(deliveryFromRow),
    pruneDeliveries: (before) => write("DELETE FROM webhook_deliveries WHERE status <> 'pending' AND finished_at < $1", [before]),
  };
}
