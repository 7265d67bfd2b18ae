import type { FastifyBaseLogger } from 'fastify';
import type { Bindings, ChildLoggerOptions, LogFn } from 'pino';

/**
 * A request's logger (Fastify's `request.log`, with its request id), made only when the request logs something. Few
 * do — request logging is off, and routes log only what goes wrong — but Fastify asks for the child of every request,
 * and pino's `child` writes its bindings out as JSON text each time: on a tiny job one at a time that was about 2 % of
 * the orchestrator's thread (bench:profile --load oip).
 */
/** A pino log method, called as the logger's own (its overloads take what `args` holds). */
const call = (method: LogFn, logger: FastifyBaseLogger, args: unknown[]): void => (method as (...rest: unknown[]) => void).apply(logger, args);

class RequestLogger implements FastifyBaseLogger {
  readonly #parent: FastifyBaseLogger;
  readonly #bindings: Bindings;
  readonly #options: ChildLoggerOptions;
  #made: FastifyBaseLogger | null = null;

  constructor(parent: FastifyBaseLogger, bindings: Bindings, options: ChildLoggerOptions) {
    this.#parent = parent;
    this.#bindings = bindings;
    this.#options = options;
  }

  get #logger(): FastifyBaseLogger {
    return (this.#made ??= this.#parent.child(this.#bindings, this.#options));
  }

  get level(): string {
    return this.#made?.level ?? this.#options.level ?? this.#parent.level;
  }

  set level(level: string) {
    this.#logger.level = level;
  }

  fatal(...args: unknown[]): void {
    call(this.#logger.fatal, this.#logger, args);
  }

  error(...args: unknown[]): void {
    call(this.#logger.error, this.#logger, args);
  }

  warn(...args: unknown[]): void {
    call(this.#logger.warn, this.#logger, args);
  }

  info(...args: unknown[]): void {
    call(this.#logger.info, this.#logger, args);
  }

  debug(...args: unknown[]): void {
    call(this.#logger.debug, this.#logger, args);
  }

  trace(...args: unknown[]): void {
    call(this.#logger.trace, this.#logger, args);
  }

  silent(...args: unknown[]): void {
    call(this.#logger.silent, this.#logger, args);
  }

  child(bindings: Bindings, options?: ChildLoggerOptions): FastifyBaseLogger {
    return this.#logger.child(bindings, options);
  }
}

/** Fastify's `childLoggerFactory`: each request's logger, made on its first use. */
export function requestLogger(logger: FastifyBaseLogger, bindings: Bindings, options: ChildLoggerOptions): FastifyBaseLogger {
  return new RequestLogger(logger, bindings, options);
}
