import type { FastifyInstance } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { ErrorEnvelope, Live, Ready, SeriesView, StatusView, StorageView } from '../../protocol/api/index.js';
import { MeshError } from '../../protocol/index.js';
import type { MeshMetrics } from '../metrics/mesh-metrics.js';
import type { MeshSeries } from '../metrics/series.js';
import type { MeshStatus } from '../status/mesh-status.js';
import type { RequestAuth } from './auth.js';
import { errorAnswers, errorResponses, json } from './openapi.js';

export interface MeshRouteDeps {
  status: MeshStatus;
  metrics: MeshMetrics;
  /** The last minutes as time series (the mesh view's plots). */
  series: MeshSeries;
  auth: RequestAuth;
}

/** Health, readiness, mesh status, storage, series and metrics. */
export function meshRoutes(app: FastifyInstance, deps: MeshRouteDeps): void {
  const { status, metrics, series, auth } = deps;
  const routes = app.withTypeProvider<ZodTypeProvider>();

  routes.get('/healthz', { schema: { tags: ['health'], summary: 'The process is up' }, config: { openapi: { responses: { 200: json('It is', Live) } } } }, async () => ({ ok: true }));

  routes.get('/readyz', {
    schema: { tags: ['health'], summary: 'The store is open and an agent is connected' },
    config: { openapi: { responses: { 200: json('Ready', Ready), ...errorResponses(ErrorEnvelope, { 503: 'Not ready, and why (NOT_READY)' }) } } },
  }, async (_request, reply) => {
    const reasons = status.notReady();
    if (reasons.length > 0) {
      void reply.code(503);
      return { error: new MeshError('NOT_READY', { detail: reasons.join('; ') }).toJSON() };
    }
    return { ok: true, agents: status.agentsConnected };
  });

  routes.get('/v1/status', {
    schema: { tags: ['mesh'], summary: 'Hosts, devices, resident models, queue depths' },
    config: { openapi: { responses: { 200: json('The mesh now', StatusView), ...errorAnswers({}) } } },
    onRequest: auth.require('mesh:read'),
  }, async () => status.view());

  routes.get('/v1/storage', {
    schema: { tags: ['mesh'], summary: 'What the store holds: the blobs (where, how many, their bytes), the jobs kept and for how long (jobs.retentionDays)' },
    config: { openapi: { responses: { 200: json('The store', StorageView), ...errorAnswers({}) } } },
    onRequest: auth.require('mesh:read'),
  }, async () => status.storage());

  routes.get('/v1/series', {
    schema: {
      tags: ['mesh'],
      summary: 'The last 15 minutes in 5 s steps: per model jobs succeeded and failed per second, queue depth, p50 and p99 latency (admission to the end, within 10 %); per device the memory in use. Kept in memory: empty after a restart',
    },
    config: { openapi: { responses: { 200: json('One array per quantity, a point per step (null: nothing then)', SeriesView), ...errorAnswers({}) } } },
    onRequest: auth.require('mesh:read'),
  }, async () => series.view());

  routes.get('/metrics', {
    schema: { tags: ['mesh'], summary: 'Prometheus metrics (a grant that may read mesh status)' },
    config: { openapi: { responses: { 200: { description: 'The Prometheus text format', content: { 'text/plain': { type: 'string' } } }, ...errorAnswers({}) } } },
    onRequest: auth.require('mesh:read'),
  }, async (_request, reply) => {
    void reply.header('content-type', metrics.contentType);
    return metrics.text();
  });
}
