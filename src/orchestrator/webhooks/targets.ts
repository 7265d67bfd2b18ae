import { lookup as dnsLookup, type LookupAddress, type LookupAllOptions } from 'node:dns';
import { isIP, type LookupFunction } from 'node:net';
import { Networks, unmapped } from '../../net/networks.js';
import { MeshError } from '../../protocol/index.js';
import { normalizeWebhookUrl } from '../auth/index.js';

/** mesh.yaml's `webhooks` rules for where callbacks may go. */
export interface TargetRules {
  /** URL prefixes allowed. */
  allow: readonly string[];
  allowLoopback: boolean;
  allowPrivate: boolean;
}

/** What refused an address or a URL: the setting (or the kind of address) and why. */
export interface Refusal {
  rule: string;
  detail: string;
}

type Resolve = (hostname: string) => Promise<LookupAddress[]>;

const resolveAll: Resolve = (hostname) => new Promise((resolve, reject) => {
  dnsLookup(hostname, { all: true } satisfies LookupAllOptions, (error, addresses) => (error ? reject(error) : resolve(addresses)));
});

/** Never a callback target: unspecified, "this network", multicast, reserved and broadcast. */
const SPECIAL = new Networks(['0.0.0.0/8', '224.0.0.0/4', '240.0.0.0/4', '::/128', 'ff00::/8']);
const LOOPBACK = new Networks(['127.0.0.0/8', '::1/128']);
/** The networks a NAS sits in and the ones that reach its neighbours: private, shared (CGNAT), link-local (cloud metadata). */
const PRIVATE = new Networks(['10.0.0.0/8', '172.16.0.0/12', '192.168.0.0/16', '100.64.0.0/10', '169.254.0.0/16', 'fc00::/7', 'fe80::/10']);


/**
 * Where a callback may go (docs/operations.md, mesh.yaml `webhooks`). Two checks: the URL against the allowlist (its
 * scheme, host, port and path: `check`), and every address the host name stands for against the address rules —
 * when a grant is minted (`checkResolved`), and at each delivery on the addresses the connection is actually made to
 * (`lookup`, given to the HTTP client, which connects only to what it passes), so a name that resolves to an allowed
 * address when checked and to a private one when called cannot lead the orchestrator into its own network.
 */
export class WebhookTargets {
  readonly #rules: TargetRules;
  readonly #allow: URL[];
  readonly #resolve: Resolve;

  constructor(rules: TargetRules, resolve: Resolve = resolveAll) {
    this.#rules = rules;
    this.#allow = rules.allow.map((entry) => new URL(entry));
    this.#resolve = resolve;
  }

  /** Why an address may not be called, or null. */
  addressProblem(address: string): Refusal | null {
    const plain = unmapped(address.replace(/^\[|\]$/g, ''));
    if (SPECIAL.has(plain)) return { rule: 'special address', detail: `${plain} is an unspecified, multicast or reserved address` };
    if (LOOPBACK.has(plain) && !this.#rules.allowLoopback) {
      return { rule: 'webhooks.allowLoopback', detail: `${plain} is a loopback address, and webhooks.allowLoopback is false` };
    }
    if (PRIVATE.has(plain) && !this.#rules.allowPrivate) {
      return { rule: 'webhooks.allowPrivate', detail: `${plain} is a private or link-local address, and webhooks.allowPrivate is false` };
    }
    return null;
  }

  /**
   * The URL in its normal form if the allowlist allows it and its host, when an address, passes the address rules;
   * else WEBHOOK_NOT_ALLOWED naming the rule (VALIDATION_FAILED for what is no URL at all).
   */
  check(text: string): string {
    const normal = normalizeWebhookUrl(text);
    if (typeof normal !== 'string') throw new MeshError('VALIDATION_FAILED', { detail: `webhook: the callback URL ${normal.problem}` });
    const url = new URL(normal);
    if (!this.#allow.some((entry) => allows(entry, url))) {
      const listed = this.#rules.allow.length === 0 ? 'the list is empty: no callbacks are allowed' : `allowed: ${this.#rules.allow.join(', ')}`;
      throw new MeshError('WEBHOOK_NOT_ALLOWED', { url: normal, rule: 'webhooks.allow', detail: `no entry of mesh.yaml's webhooks.allow is a prefix of it (${listed})` });
    }
    const host = url.hostname.replace(/^\[|\]$/g, '');
    const refused = isIP(host) ? this.addressProblem(host) : null;
    if (refused) throw new MeshError('WEBHOOK_NOT_ALLOWED', { url: normal, ...refused });
    return normal;
  }

  /** `check`, then every address the host name resolves to now (a name that does not resolve is refused too). */
  async checkResolved(text: string): Promise<string> {
    const normal = this.check(text);
    const host = new URL(normal).hostname.replace(/^\[|\]$/g, '');
    if (isIP(host)) return normal;
    let addresses: LookupAddress[];
    try {
      addresses = await this.#resolve(host);
    } catch (error) {
      throw new MeshError('WEBHOOK_NOT_ALLOWED', { url: normal, rule: 'name resolution', detail: `${host} does not resolve (${(error as Error).message})` });
    }
    for (const { address } of addresses) {
      const refused = this.addressProblem(address);
      if (refused) throw new MeshError('WEBHOOK_NOT_ALLOWED', { url: normal, rule: refused.rule, detail: `${host} resolves to ${refused.detail}` });
    }
    return normal;
  }

  /**
   * A `lookup` for node:net: resolves the name and passes on only the addresses the rules allow, so the connection is
   * made to an allowed address or not at all (the error names the rule).
   */
  readonly lookup: LookupFunction = (hostname, options, callback) => {
    this.#resolve(hostname).then((addresses) => {
      const wanted = options.family === 4 || options.family === 6 ? addresses.filter((entry) => entry.family === options.family) : addresses;
      const allowed = wanted.filter((entry) => !this.addressProblem(entry.address));
      if (allowed.length === 0) {
        const refused = wanted[0] ? this.addressProblem(wanted[0].address) : null;
        const error = Object.assign(new Error(refused
          ? `${hostname} resolves to ${wanted.map((entry) => entry.address).join(', ')}: refused by ${refused.rule} (${refused.detail})`
          : `${hostname} has no address of the family asked for`), { code: 'EWEBHOOKREFUSED' });
        callback(error, '', 0);
        return;
      }
      if (options.all) (callback as unknown as (error: null, addresses: LookupAddress[]) => void)(null, allowed);
      else callback(null, allowed[0]!.address, allowed[0]!.family);
    }, (error: NodeJS.ErrnoException) => callback(error, '', 0));
  };
}

const DEFAULT_PORTS: Record<string, string> = { 'http:': '80', 'https:': '443' };

/** Whether an allowlist entry allows a URL: the same scheme, host and port, and its path at or under the entry's. */
function allows(entry: URL, url: URL): boolean {
  if (entry.protocol !== url.protocol || entry.hostname !== url.hostname) return false;
  if ((entry.port || DEFAULT_PORTS[entry.protocol]) !== (url.port || DEFAULT_PORTS[url.protocol])) return false;
  const base = entry.pathname;
  return url.pathname === base || url.pathname.startsWith(base.endsWith('/') ? base : `${base}/`);
}
