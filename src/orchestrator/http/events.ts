import type { FastifyInstance } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { EVENT_TYPES, isTerminalEvent, type GrantEndedEvent, type JobEvent } from '../../protocol/api/index.js';
import { MeshError } from '../../protocol/index.js';
import type { Action, GrantEnd, VerifiedGrant } from '../auth/index.js';
import { firstFailure } from '../auth/index.js';
import type { EventBus, ScopedEvent } from '../events/event-bus.js';
import { canSee, type JobReads } from '../jobs/index.js';
import { grantOf, QUERY_GRANT_ALLOWED, type RequestAuth } from './auth.js';
import { errorAnswers } from './openapi.js';
import { openSse, type SseStream } from './sse.js';

/**
 * `?types=succeeded,failed`: the event types a stream carries (default: all). A client that waits only for results
 * asks for the terminal ones and is sent a fifth of the events. `resync` and `grant:ended` always come.
 */
const EventTypeList = z.string().max(1000).transform((text, context) => {
  const names = text.split(',').map((name) => name.trim()).filter((name) => name !== '');
  const unknown = names.filter((name) => !(EVENT_TYPES as readonly string[]).includes(name));
  if (unknown.length > 0) {
    context.addIssue({ code: 'custom', message: `unknown event type ${unknown.map((name) => `"${name}"`).join(', ')}; known: ${EVENT_TYPES.join(', ')}` });
    return z.NEVER;
  }
  return new Set<string>(names);
});

const may = (grant: VerifiedGrant, action: Action, now: number): boolean => firstFailure(grant, { action }, now) === null;

/** Tell the client why its stream ends, then end it: a stream lasts no longer than its grant. */
function endForGrant(stream: SseStream, reason: GrantEnd, grant: VerifiedGrant, now: number): void {
  const error = reason === 'revoked' ? new MeshError('GRANT_REVOKED') : new MeshError('GRANT_EXPIRED', { expires: new Date(grant.expiresAt ?? now).toISOString() });
  const event: GrantEndedEvent = { type: 'grant:ended', reason, error: error.toJSON(), at: new Date(now).toISOString() };
  stream.send(event.type, event);
  stream.close();
}

/**
 * GET /v1/jobs/:id/events and GET /v1/events (Server-Sent Events). Both take
 * their grant from `?access_token=` too (EventSource cannot send headers), and
 * both end with a `grant:ended` event when that grant is revoked or expires.
 */
/** An event stream's answer, for the document: each event's `event:` is its type and `data:` its JSON (docs/api.md). */
const EVENT_STREAM = {
  description: 'Server-Sent Events: `event: <type>`, `data: <the event as JSON>`, `id:` to resume from (Last-Event-ID); comments keep the connection alive',
  content: { 'text/event-stream': { type: 'string' } },
};

export function eventRoutes(app: FastifyInstance, deps: { reads: Pick<JobReads, 'record' | 'snapshot'>; events: EventBus; auth: RequestAuth }): void {
  const { reads, events, auth } = deps;
  const routes = app.withTypeProvider<ZodTypeProvider>();

  routes.get('/v1/jobs/:id/events', {
    schema: { params: z.object({ id: z.string().min(1).max(100) }), tags: ['events'], summary: "One job's events (SSE); ends after the terminal event" },
    config: {
      ...QUERY_GRANT_ALLOWED,
      openapi: { responses: { 200: EVENT_STREAM, ...errorAnswers({ 404: 'No such job that this grant may see' }) } },
    },
    onRequest: auth.require('jobs:read'),
  }, async (request, reply) => {
    const grant = grantOf(request);
    const { id } = request.params;
    await reads.record(grant, id); // 404 before the stream opens
    let live = false;
    const stream = openSse(request, reply, () => {
      unsubscribe();
      stopWatching();
    }, events.clock);
    const stopWatching = auth.watch(request, (why) => endForGrant(stream, why, grant, auth.now()));
    const deliver = (event: JobEvent, eventId?: string, json?: string): void => {
      stream.send(event.type, event, eventId, json);
      if (isTerminalEvent(event)) stream.close();
    };
    // Subscribe before reading the state so nothing falls between the two.
    const buffered: { event: JobEvent; id: string; data?: string }[] = [];
    const unsubscribe = events.subscribeJob(id, (scoped) => (live ? deliver(scoped.event, scoped.id, scoped.data) : buffered.push(scoped)));
    for (const event of await reads.snapshot(grant, id)) deliver(event);
    live = true;
    for (const { event, id: eventId, data } of buffered) deliver(event, eventId, data);
  });

  routes.get('/v1/events', {
    schema: {
      querystring: z.object({ types: EventTypeList.optional() }),
      tags: ['events'], summary: 'Every job event the grant may see, and mesh events for grants that may read mesh status (SSE); honours Last-Event-ID',
    },
    config: { ...QUERY_GRANT_ALLOWED, openapi: { responses: { 200: EVENT_STREAM, ...errorAnswers({ 400: 'An unknown event type in `types`' }) } } },
    onRequest: auth.require('jobs:read'),
  }, async (request, reply) => {
    const grant = grantOf(request);
    const lastEventId = request.headers['last-event-id'];
    const stream = openSse(request, reply, () => {
      subscription.unsubscribe();
      stopWatching();
    }, events.clock);
    const stopWatching = auth.watch(request, (why) => endForGrant(stream, why, grant, auth.now()));
    const wanted = request.query.types ?? null;
    const visible = (scoped: ScopedEvent): boolean => (wanted === null || wanted.has(scoped.event.type))
      && (scoped.kind === 'job' ? canSee(grant, scoped.scope, auth.now()) : may(grant, 'mesh:read', auth.now()));
    const subscription = events.subscribeAll((scoped) => {
      if (visible(scoped)) stream.send(scoped.event.type, scoped.event, scoped.id, scoped.data);
    }, typeof lastEventId === 'string' ? lastEventId : undefined);
    // A reconnect whose gap cannot be replayed (the orchestrator restarted) is told to resync from the API.
    if (!subscription.replayed) stream.send('resync', { reason: 'events since Last-Event-ID are not available; reload from /v1/jobs and /v1/artifacts' });
  });
}
