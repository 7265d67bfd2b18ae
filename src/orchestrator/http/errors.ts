import { maxHeaderSize, STATUS_CODES } from 'node:http';
import type { Socket } from 'node:net';
import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest, FastifyServerOptions } from 'fastify';
import { hasZodFastifySchemaValidationErrors } from 'fastify-type-provider-zod';
import { MeshError } from '../../protocol/index.js';
import { storageFullError } from '../storage/free-space.js';

/** Largest refused body read to its end (and discarded) so the 413 reaches the client. */
const DRAIN_LIMIT_BYTES = 64 * 1024 * 1024;

/**
 * Longest path parameter the router hands on; a longer one is a 414 before any route runs.
 * It sits above every route schema's own limit, so an id that is merely too long gets the
 * schema's precise 400 (and a request without a grant its 401 first).
 */
const MAX_PARAM_LENGTH = 1000;

/** Client text echoed back in a message is cut here, so an error answer stays small. */
const ECHO_LIMIT = 200;

const echo = (text: string): string => (text.length > ECHO_LIMIT ? `${text.slice(0, ECHO_LIMIT)}…` : text);

/** Fastify's own error codes for client mistakes, mapped to ours. */
const FASTIFY_CLIENT_ERRORS: Record<string, (error: FastifyError, request: FastifyRequest) => MeshError> = {
  FST_ERR_CTP_INVALID_MEDIA_TYPE: (_error, request) => new MeshError('UNSUPPORTED_MEDIA_TYPE', { detail: echo(request.headers['content-type'] ?? 'none') }),
  FST_ERR_CTP_EMPTY_JSON_BODY: () => new MeshError('BAD_REQUEST', { detail: 'the JSON body is empty' }),
  FST_ERR_CTP_INVALID_JSON_BODY: (error) => new MeshError('BAD_REQUEST', { detail: `the body is not valid JSON (${error.message})` }),
  FST_ERR_CTP_INVALID_CONTENT_LENGTH: () => new MeshError('BAD_REQUEST', { detail: 'Content-Length does not match the body' }),
  FST_ERR_ROUTE_MISSING_CONTENT_TYPE: () => new MeshError('BAD_REQUEST', { detail: 'the request has a body but no Content-Type' }),
  FST_ERR_BAD_URL: (_error, request) => new MeshError('BAD_REQUEST', { detail: `the path ${echo(pathOf(request))} is not valid percent-encoding` }),
  FST_ERR_MAX_PARAM_LENGTH: () => new MeshError('URI_TOO_LONG', { limit: MAX_PARAM_LENGTH }),
};

/** What a Fastify status means when the error itself is not one we know by code. */
const BY_STATUS: Record<number, (error: FastifyError, request: FastifyRequest) => MeshError> = {
  // The static file server's refusal of a directory or of a path outside web/: there is nothing to serve there.
  403: (_error, request) => routeNotFound(request),
  404: (_error, request) => routeNotFound(request),
  408: () => new MeshError('REQUEST_TIMEOUT'),
  412: () => new MeshError('PRECONDITION_FAILED'),
  414: () => new MeshError('URI_TOO_LONG', { limit: MAX_PARAM_LENGTH }),
  415: (_error, request) => new MeshError('UNSUPPORTED_MEDIA_TYPE', { detail: echo(request.headers['content-type'] ?? 'none') }),
  416: (_error, request) => new MeshError('RANGE_NOT_SATISFIABLE', { range: echo(String(request.headers.range ?? '')), size: 'file\'s' }),
};

const routeNotFound = (request: FastifyRequest): MeshError =>
  new MeshError('ROUTE_NOT_FOUND', { method: request.method, url: echo(pathOf(request)) });

const pathOf = (request: FastifyRequest): string => (request.raw.url ?? '').split('?')[0]!;

interface ValidationIssue { instancePath: string; message?: string }

/**
 * A schema failure, worded for where it is: "The path parameter id is invalid: …",
 * "The query parameter limit is invalid: …", "The request body is invalid: …".
 */
function fromValidation(issues: readonly ValidationIssue[], where: string | undefined): MeshError {
  const fields = issues.map((issue) => ({ field: issue.instancePath.slice(1).replaceAll('/', '.'), message: issue.message ?? 'invalid' }));
  const listed = (list: typeof fields): string => list.map(({ field, message }) => (field ? `${field}: ${message}` : message)).join('; ');
  if (where === 'params' || where === 'querystring') {
    // Name the first bad parameter; its own issues read as the reason, any others follow by name.
    const name = fields[0]?.field.split('.')[0] || '(unnamed)';
    const own = fields.filter(({ field }) => field.split('.')[0] === name);
    const others = fields.filter((entry) => !own.includes(entry));
    const detail = [own.map(({ message }) => message).join('; '), ...(others.length ? [listed(others)] : [])].join('; ');
    return new MeshError(where === 'params' ? 'INVALID_PATH_PARAMETER' : 'INVALID_QUERY_PARAMETER', { name, detail });
  }
  if (where === 'headers') return new MeshError('BAD_REQUEST', { detail: `headers: ${listed(fields)}` });
  return new MeshError('VALIDATION_FAILED', { detail: listed(fields) });
}

/** Any error thrown while answering a request, as the MeshError the client gets. */
export function toMeshError(error: FastifyError, request: FastifyRequest): MeshError {
  if (error instanceof MeshError) return error;
  if (hasZodFastifySchemaValidationErrors(error) || error.code === 'FST_ERR_VALIDATION') {
    return fromValidation((error.validation ?? []) as ValidationIssue[], error.validationContext);
  }
  const known = error.code ? FASTIFY_CLIENT_ERRORS[error.code] : undefined;
  if (known) return known(error, request);
  if (error instanceof SyntaxError) return new MeshError('BAD_REQUEST', { detail: `the body is not valid JSON (${error.message})` });
  const full = storageFullError(error);
  if (full) return full;
  if (typeof error.statusCode === 'number' && error.statusCode >= 400 && error.statusCode < 500) {
    return BY_STATUS[error.statusCode]?.(error, request) ?? new MeshError('BAD_REQUEST', { detail: echo(error.message) });
  }
  request.log.error({ err: error }, 'unhandled error');
  return new MeshError('INTERNAL', { detail: 'see the orchestrator log' }, { cause: error });
}

/**
 * An error answered while the request's body was part read (an upload that met a full disk, a multipart edit refused
 * at a bad part) must not leave the connection waiting on bytes nobody reads: Node reads the next request only once
 * this one's body has ended, and a reader that stopped (a stream a failed pipeline destroyed) never ends it — the next
 * request on the connection would hang. So the answer closes the connection (`Connection: close`: Node ends the socket
 * once the answer is out) and the client takes the next request to a new one. Reading the rest instead would keep the
 * connection, but clients stop sending a body once its answer has come (Node's http client does), and would then wait
 * on it. A body nothing has started to read is left to Node, which reads and discards it itself, keeping the connection.
 *
 * The close lingers (as nginx's `lingering_close`): Node destroys the socket right after its FIN, and a socket closed
 * with bytes still arriving answers them with a reset — which, reaching a client still sending its body, can discard
 * the answer it had not read yet (a 507 lost as an EPIPE). So the socket sends its FIN, then reads and drops what
 * still comes, until the client closes or LINGER_MS passes.
 */
export function settleUnreadBody(request: FastifyRequest, reply: FastifyReply): void {
  const raw = request.raw;
  if (raw.complete) return;
  if (!raw.destroyed && !raw.readableDidRead && raw.readableFlowing === null) return;
  void reply.header('connection', 'close');
  const socket = reply.raw.socket ?? raw.socket;
  if (socket) lingerOnClose(socket);
}

/** How long a closing connection reads and drops what its client still sends before it is destroyed. */
const LINGER_MS = 2000;

function lingerOnClose(socket: Socket): void {
  // Node's server ends a `Connection: close` answer's socket with destroySoon (its FIN, then destroy): the FIN alone here.
  socket.destroySoon = function lingering(this: Socket): void {
    if (this.destroyed) return;
    const timer = setTimeout(() => this.destroy(), LINGER_MS);
    timer.unref();
    this.once('close', () => clearTimeout(timer));
    // The client's FIN (it read the answer and closed) ends the wait at once.
    this.once('end', () => this.destroy());
    // No one parses what still comes: it is read and dropped, so the socket never stops reading.
    this.removeAllListeners('data');
    this.on('data', () => {});
    this.resume();
    if (this.writable) this.end();
  };
}

/**
 * A body over its limit (Fastify's FST_ERR_CTP_BODY_TOO_LARGE), as the 413 to answer. Fastify closes the connection
 * here; closing with the body still arriving makes the kernel send a reset that can destroy the 413 before the client
 * reads it. For bodies of a sane size, the connection is kept and Node discards the rest, so the client always sees
 * the answer. `limit`: the route's own, else the server's.
 */
export function bodyTooLarge(request: FastifyRequest, reply: FastifyReply, serverLimit: number): MeshError {
  if (Number(request.headers['content-length'] ?? Infinity) <= DRAIN_LIMIT_BYTES) reply.removeHeader('connection');
  return new MeshError('PAYLOAD_TOO_LARGE', { limit: request.routeOptions.bodyLimit ?? serverLimit });
}

function sendError(reply: FastifyReply, mesh: MeshError): void {
  if (mesh.status >= 500) reply.log.warn({ code: mesh.code }, mesh.message);
  // The route may already have named another content type (a blob, the metrics text).
  void reply.code(mesh.status).headers(mesh.headers).type('application/json; charset=utf-8').send({ error: mesh.toJSON() });
}

/**
 * The Fastify constructor options for the answers it gives before any route or hook
 * runs: a path that is not valid percent-encoding or has an over-long parameter
 * (`frameworkErrors`), and a request that is not HTTP at all (`clientErrorHandler`:
 * an unknown method, headers too large, a timeout). Both answer in the envelope.
 */
export function frameworkErrorOptions(): Pick<FastifyServerOptions, 'frameworkErrors' | 'clientErrorHandler' | 'routerOptions' | 'return503OnClosing'> {
  return {
    routerOptions: { maxParamLength: MAX_PARAM_LENGTH },
    frameworkErrors: (error, request, reply) => sendError(reply, toMeshError(error, request)),
    clientErrorHandler: answerClientError,
    // Fastify's own 503 while closing is not in the envelope; installErrorHandling answers it instead.
    return503OnClosing: false,
  };
}

/** A request Node's HTTP parser refused: answer on the bare socket (no request object exists) and close it. */
function answerClientError(this: FastifyInstance, error: Error & { code?: string }, socket: Socket): void {
  if (error.code === 'ECONNRESET' || socket.destroyed) return;
  if (!socket.writable) return void socket.destroy();
  let mesh: MeshError;
  if (error.code === 'ERR_HTTP_REQUEST_TIMEOUT') mesh = new MeshError('REQUEST_TIMEOUT');
  else if (error.code === 'HPE_HEADER_OVERFLOW') mesh = new MeshError('HEADERS_TOO_LARGE', { limit: (this.server as { maxHeaderSize?: number }).maxHeaderSize ?? maxHeaderSize });
  else if (error.code === 'HPE_INVALID_METHOD') mesh = new MeshError('BAD_REQUEST', { detail: 'the HTTP method is not one this server knows' });
  else mesh = new MeshError('BAD_REQUEST', { detail: `the request is not valid HTTP/1.1 (${error.code ?? error.message})` });
  this.log.debug({ err: error }, 'client error');
  const body = JSON.stringify({ error: mesh.toJSON() });
  socket.end(
    `HTTP/1.1 ${mesh.status} ${STATUS_CODES[mesh.status]}\r\nContent-Type: application/json; charset=utf-8\r\n` +
    `Content-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`,
  );
}

/**
 * One place that turns every thrown error into `{ error: { code, message } }`:
 * ours carry their status; Fastify's and zod's client errors become 4xx;
 * anything else is a 500 and is logged, because it is our bug. Unknown routes
 * are 404 ROUTE_NOT_FOUND, requests that arrive while the server closes are
 * 503 NOT_READY, and an unknown `Expect` is ignored rather than a bare 417.
 */
export function installErrorHandling(app: FastifyInstance, bodyLimitBytes: number): void {
  app.setErrorHandler((error: FastifyError, request, reply) => {
    if (error.code === 'FST_ERR_CTP_BODY_TOO_LARGE') return sendError(reply, bodyTooLarge(request, reply, bodyLimitBytes));
    const mesh = toMeshError(error, request);
    settleUnreadBody(request, reply);
    sendError(reply, mesh);
  });
  app.setNotFoundHandler((request, reply) => sendError(reply, routeNotFound(request)));
  // Node answers an Expect other than 100-continue with a bare 417 of its own; RFC 9110 lets a server
  // ignore it instead, which keeps such requests on the one path (grant, validation, envelope).
  app.server.on('checkExpectation', (request, response) => app.server.emit('request', request, response));
  let closing = false;
  app.addHook('preClose', (done) => {
    closing = true;
    done();
  });
  app.addHook('onRequest', (_request, _reply, done) => {
    done(closing ? new MeshError('NOT_READY', { detail: 'the orchestrator is shutting down' }) : undefined);
  });
}
