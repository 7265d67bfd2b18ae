import { DELIVERY_COLUMNS, deliveryFromRow, deliveryValues, tryValues, type DeliveryRow, type WebhookTable } from '../contract/webhooks.js';
import { stmt, type Db } from './db.js';

/** The job_webhooks, pipeline_webhooks and webhook_deliveries tables on one connection. */
export function webhookTable(db: Db): WebhookTable {
  return {
    armJob: (jobId, url, now) => {
      stmt(db, 'INSERT OR REPLACE INTO job_webhooks (job_id, url, created_at) VALUES (?, ?, ?)').run(jobId, url, now);
    },
    disarmJob: (jobId) => {
      stmt(db, 'DELETE FROM job_webhooks WHERE job_id = ?').run(jobId);
    },
    armedJobs: async () => (stmt(db, 'SELECT job_id AS jobId, url FROM job_webhooks ORDER BY created_at').all() as { jobId: string; url: string }[]),
    armPipeline: (pipelineId, url, now) => {
      stmt(db, 'INSERT OR REPLACE INTO pipeline_webhooks (pipeline_id, url, created_at) VALUES (?, ?, ?)').run(pipelineId, url, now);
    },
    disarmPipeline: (pipelineId) => {
      stmt(db, 'DELETE FROM pipeline_webhooks WHERE pipeline_id = ?').run(pipelineId);
    },
    armedPipelines: async () => (stmt(db, 'SELECT pipeline_id AS pipelineId, url FROM pipeline_webhooks ORDER BY created_at').all() as { pipelineId: string; url: string }[]),
    insertDelivery: (record) => {
      stmt(db, `INSERT INTO webhook_deliveries (${DELIVERY_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`).run(...deliveryValues(record));
    },
    updateDelivery: (id, outcome) => {
      stmt(db, `UPDATE webhook_deliveries SET status = ?, attempts = ?, last_status = ?, last_error = ?, next_at = ?, tried_at = ?, finished_at = ?
        WHERE id = ?`).run(...tryValues(id, outcome));
    },
    pendingDeliveries: async () => (stmt(db, `SELECT ${DELIVERY_COLUMNS} FROM webhook_deliveries WHERE status = 'pending' ORDER BY created_at`).all() as DeliveryRow[]).map(deliveryFromRow),
    deliveriesOf: async (subjectId) => (stmt(db, `SELECT ${DELIVERY_COLUMNS} FROM webhook_deliveries WHERE subject_id = ? ORDER BY created_at, id`).all(subjectId) as DeliveryRow[]).map(deliveryFromRow),
    pruneDeliveries: (before) => {
      stmt(db, "DELETE FROM webhook_deliveries WHERE status <> 'pending' AND finished_at < ?").run(before);
    },
  };
}
