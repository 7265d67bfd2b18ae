import type { FastifyInstance } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { AuditPage, caveatsFromOptions, GrantPage, GrantView, Minted, Narrowed } from '../../protocol/api/index.js';
import { inspectGrant } from '../../protocol/grant-token.js';
import { MeshError } from '../../protocol/index.js';
import { AUDIT_EVENTS, type AuditLog } from '../auth/audit.js';
import { narrowGrant, parseCaveat, scopeProblem, type Caveat, type GrantIssuer } from '../auth/index.js';
import { grantOf, type RequestAuth } from './auth.js';
import { errorAnswers, json } from './openapi.js';
import type { WebhookService } from './webhooks.js';

const NAME = /^[A-Za-z0-9][A-Za-z0-9._:-]{0,99}$/;
const names = z.array(z.string().regex(NAME)).min(1).optional();

/** Caps (`max-queued`, `device-seconds-per-day`): a narrowing may only lower them. */
const caps = {
  maxQueued: z.int().min(0).optional().describe('the most jobs of its lineage queued at once'),
  deviceSecondsPerDay: z.int().min(0).optional().describe('device-seconds its lineage may compute per UTC day'),
};

/** What a narrowing may add: the list caveats, a shorter life, a lower ceiling, a rate, lower caps (never a kind or a host). */
const NarrowGrantBody = z.strictObject({
  types: names, models: names, classes: names, hosts: names, albums: names, actions: names,
  expires: z.string().max(40).optional(),
  maxPriority: z.int().min(1).optional(),
  rate: z.string().regex(/^\d+\/(s|m|h)$/).optional(),
  ...caps,
  webhook: z.string().min(1).max(2000).optional().describe('a callback URL its jobs call when they end (only where the grant has none, or the same)'),
});

const CreateGrantBody = z.strictObject({
  kind: z.enum(['admin', 'client', 'agent']),
  types: names, models: names, classes: names, hosts: names, albums: names, actions: names,
  host: z.string().regex(NAME).optional(),
  expires: z.string().max(40).optional(),
  maxPriority: z.int().min(1).optional(),
  rate: z.string().regex(/^\d+\/(s|m|h)$/).optional(),
  ...caps,
  webhook: z.string().min(1).max(2000).optional().describe('a callback URL its jobs call when they end; the answer carries its signing secret'),
  note: z.string().max(200).optional(),
});

const Page = (max: number, fallback: number) => z.object({
  limit: z.coerce.number().int().min(1).max(max).default(fallback),
  cursor: z.string().max(200).optional(),
});

export interface GrantRouteDeps {
  issuer: GrantIssuer;
  audit: AuditLog;
  auth: RequestAuth;
  /** Callback URLs checked against mesh.yaml's `webhooks` rules, and their signing secrets. */
  webhooks: WebhookService;
}

/** Minting, listing and revoking grants, and the audit log: admin only (actions no other kind has). */
export function grantRoutes(app: FastifyInstance, deps: GrantRouteDeps): void {
  const { issuer, audit, auth, webhooks } = deps;
  const routes = app.withTypeProvider<ZodTypeProvider>();

  routes.post('/v1/grants', {
    schema: { body: CreateGrantBody, tags: ['grants'], summary: 'Mint a grant (admin)' },
    config: {
      openapi: {
        responses: {
          201: json('The grant', Minted),
          ...errorAnswers({ 400: 'A caveat that is malformed, or would govern nothing on this kind of grant', 403: 'The callback URL is not allowed (WEBHOOK_NOT_ALLOWED)' }),
        },
      },
    },
    onRequest: auth.require('grants:create'),
  }, async (request, reply) => {
    // A callback URL is held to the allowlist and to the addresses its name resolves to now (and again at each delivery).
    const body = request.body.webhook === undefined ? request.body : { ...request.body, webhook: await webhooks.checkResolved(request.body.webhook) };
    if (body.kind === 'agent' && !body.host) throw new MeshError('VALIDATION_FAILED', { detail: 'an agent grant needs a host' });
    let caveats: string[];
    try {
      caveats = caveatsFromOptions(body, auth.now());
    } catch (error) {
      throw new MeshError('VALIDATION_FAILED', { detail: (error as Error).message });
    }
    const parsed = caveats.map((line) => parseCaveat(line));
    const malformed = parsed.find((caveat): caveat is string => typeof caveat === 'string');
    if (malformed) throw new MeshError('VALIDATION_FAILED', { detail: malformed });
    // A caveat that would govern nothing on this kind of grant is refused, not minted as a false promise.
    const problem = scopeProblem([{ condition: 'kind', value: body.kind }, ...(parsed as Caveat[])]);
    if (problem) throw new MeshError('VALIDATION_FAILED', { detail: problem });
    const minted = await issuer.mint(body.kind, caveats, body.note ?? `minted by ${grantOf(request).id}`, auth.origin(request));
    void reply.code(201);
    return {
      id: minted.id, kind: body.kind, token: minted.token, caveats: minted.caveats,
      ...(body.webhook === undefined ? {} : { webhook: { url: body.webhook, secret: webhooks.secretFor(body.webhook) } }),
    };
  });

  // `::` is a literal colon in Fastify's router: the path is /v1/grants:narrow.
  routes.post('/v1/grants::narrow', {
    schema: {
      body: NarrowGrantBody, tags: ['grants'],
      summary: 'The grant sent, narrowed by these caveats (any valid grant; narrowing only takes powers away, as `gpumesh grant narrow` does offline): for a page that must put a read-only, short-lived grant in URLs',
    },
    config: { openapi: { responses: { 200: json('The narrowed grant', Narrowed), ...errorAnswers({ 400: 'No caveat to add, or one that is malformed' }) } } },
    onRequest: auth.requireAny(),
  }, async (request) => {
    let lines: string[];
    const body = request.body.webhook === undefined ? request.body : { ...request.body, webhook: webhooks.check(request.body.webhook) };
    try {
      lines = caveatsFromOptions(body, auth.now());
    } catch (error) {
      throw new MeshError('VALIDATION_FAILED', { detail: (error as Error).message });
    }
    if (lines.length === 0) throw new MeshError('VALIDATION_FAILED', { detail: 'name at least one caveat to add (actions, types, models, albums, classes, hosts, expires, maxPriority, rate, maxQueued, deviceSecondsPerDay or webhook)' });
    let token: string;
    try {
      token = narrowGrant(request.grantToken!, lines);
    } catch (error) {
      // The grant itself was verified: what is wrong is a caveat asked for (malformed, or meaningless on this kind).
      throw new MeshError('VALIDATION_FAILED', { detail: error instanceof MeshError ? String(error.params.detail) : (error as Error).message });
    }
    return { token, caveats: inspectGrant(token).caveats };
  });

  routes.get('/v1/grants', {
    schema: { querystring: Page(500, 100), tags: ['grants'], summary: 'Recorded grants, newest first: kind, caveats, note, created, revoked (admin)' },
    config: { openapi: { responses: { 200: json('A page of grants', GrantPage), ...errorAnswers({ 400: 'A query parameter is invalid' }) } } },
    onRequest: auth.require('grants:read'),
  }, async (request) => {
    audit.record({ event: 'admin:action', ...auth.origin(request), detail: 'listed grants' });
    return issuer.list(request.query);
  });

  routes.get('/v1/grants/:id', {
    schema: { params: z.object({ id: z.string().min(1).max(64) }), tags: ['grants'], summary: 'One recorded grant, with its caps and what its lineage uses of them now (admin)' },
    config: { openapi: { responses: { 200: json('The grant', GrantView), ...errorAnswers({ 404: 'No such grant' }) } } },
    onRequest: auth.require('grants:read'),
  }, async (request) => issuer.show(request.params.id));

  routes.delete('/v1/grants/:id', {
    schema: {
      params: z.object({ id: z.string().min(1).max(64) }), tags: ['grants'],
      summary: 'Revoke a grant and every grant narrowed from it, at once and across restarts; idempotent (admin)',
    },
    config: { openapi: { responses: { 200: json('The grant, with revokedAt', GrantView), ...errorAnswers({ 404: 'No such grant' }) } } },
    onRequest: auth.require('grants:revoke'),
  }, async (request) => issuer.revoke(request.params.id, auth.origin(request)));

  routes.get('/v1/audit', {
    schema: {
      querystring: Page(500, 100).extend({
        event: z.enum(AUDIT_EVENTS).optional(),
        actor: z.string().min(1).max(64).optional(),
        grant: z.string().min(1).max(64).optional(),
        since: z.iso.datetime({ offset: true }).optional(),
      }),
      tags: ['grants'],
      summary: 'The audit log, newest first: grants minted and revoked, refused requests, admin actions; narrowed by event, actor, grant and since (admin)',
    },
    config: { openapi: { responses: { 200: json('A page of entries', AuditPage), ...errorAnswers({ 400: 'A query parameter is invalid' }) } } },
    onRequest: auth.require('audit:read'),
  }, async (request) => {
    const { event, actor, grant, since, ...page } = request.query;
    const found = await audit.list({ ...page, event, actor, grantId: grant, since: since === undefined ? undefined : Date.parse(since) });
    // Recorded after reading, so a page never starts with its own reading.
    audit.record({ event: 'admin:action', ...auth.origin(request), detail: 'read the audit log' });
    return found;
  });
}
