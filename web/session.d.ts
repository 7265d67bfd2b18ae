// Types for session.js (a plain ES module the browser loads as is), for the tests that import it.

export function grantIn(text: string): string;

export class ApiError extends Error {
  constructor(status: number, code: string, message: string);
  status: number;
  code: string;
}

export class GrantChanged extends ApiError {
  constructor();
}

export interface ApiOptions {
  /** Runs on a 401 for the grant still in use, before the error is thrown. */
  onUnauthorized?(message: string): void;
}

export type Api = (path: string, options?: { method?: string; json?: unknown }) => Promise<unknown>;

export function createApi(grant: () => string | null, options?: ApiOptions): Api;
