import type { LookupAddress } from 'node:dns';
import { describe, expect, it } from 'vitest';
import { MeshError } from '../../../src/protocol/index.js';
import { signWebhook, verifyWebhook, webhookSecret, WebhookTargets, type TargetRules } from '../../../src/orchestrator/webhooks/index.js';

/** A resolver that says what the test wants: the name a DNS answer could smuggle a private address through. */
const resolver = (answers: Record<string, string[]>) => async (hostname: string): Promise<LookupAddress[]> => {
  const addresses = answers[hostname];
  if (!addresses) throw Object.assign(new Error(`getaddrinfo ENOTFOUND ${hostname}`), { code: 'ENOTFOUND' });
  return addresses.map((address) => ({ address, family: address.includes(':') ? 6 : 4 }));
};

const rules = (extra: Partial<TargetRules> = {}): TargetRules => ({ allow: ['https://hooks.example.com/gpumesh/', 'http://10.0.0.7:8080'], allowLoopback: false, allowPrivate: false, ...extra });

function refusal(run: () => unknown): { code: string; rule: unknown } | null {
  try {
    run();
    return null;
  } catch (error) {
    if (!(error instanceof MeshError)) throw error;
    return { code: error.code, rule: error.params.rule };
  }
}

describe('WebhookTargets', () => {
  const targets = new WebhookTargets(rules(), resolver({ 'hooks.example.com': ['93.184.216.34'], 'evil.example.com': ['10.1.2.3'] }));

  it('allows a URL under an entry of the allowlist: same scheme, host and port, the path at or under the entry\'s', () => {
    expect(targets.check('https://hooks.example.com/gpumesh/done?x=1')).toBe('https://hooks.example.com/gpumesh/done?x=1');
    expect(targets.check('https://HOOKS.example.com:443/gpumesh/')).toBe('https://hooks.example.com/gpumesh/');
    for (const url of ['http://hooks.example.com/gpumesh/', 'https://hooks.example.com:8443/gpumesh/', 'https://hooks.example.com/gpumeshx', 'https://hooks.example.com/',
      'https://other.example.com/gpumesh/']) {
      expect(refusal(() => targets.check(url)), url).toEqual({ code: 'WEBHOOK_NOT_ALLOWED', rule: 'webhooks.allow' });
    }
  });

  it('refuses what is no callback URL at all', () => {
    for (const url of ['ftp://hooks.example.com/gpumesh/', 'https://user:pw@hooks.example.com/gpumesh/', 'https://hooks.example.com/gpumesh/#x', 'hooks']) {
      expect(refusal(() => targets.check(url))?.code, url).toBe('VALIDATION_FAILED');
    }
  });

  it('refuses private and loopback addresses unless the config allows them, even when listed', () => {
    expect(refusal(() => targets.check('http://10.0.0.7:8080/x'))).toEqual({ code: 'WEBHOOK_NOT_ALLOWED', rule: 'webhooks.allowPrivate' });
    expect(new WebhookTargets(rules({ allowPrivate: true })).check('http://10.0.0.7:8080/x')).toBe('http://10.0.0.7:8080/x');
    const loopback = new WebhookTargets({ allow: ['http://127.0.0.1:9000', 'http://[::1]:9000', 'http://[::ffff:127.0.0.1]:9000'], allowLoopback: false, allowPrivate: true });
    for (const url of ['http://127.0.0.1:9000/', 'http://[::1]:9000/', 'http://[::ffff:127.0.0.1]:9000/']) {
      expect(refusal(() => loopback.check(url)), url).toEqual({ code: 'WEBHOOK_NOT_ALLOWED', rule: 'webhooks.allowLoopback' });
    }
    const everything = new WebhookTargets({ allow: ['http://0.0.0.0:9000', 'http://224.0.0.1:9000'], allowLoopback: true, allowPrivate: true });
    expect(refusal(() => everything.check('http://0.0.0.0:9000/'))?.rule).toBe('special address');
    expect(refusal(() => everything.check('http://224.0.0.1:9000/'))?.rule).toBe('special address');
    for (const address of ['169.254.169.254', '172.16.4.4', '192.168.1.1', '100.64.0.1', 'fd00::1', 'fe80::1']) {
      expect(targets.addressProblem(address)?.rule, address).toBe('webhooks.allowPrivate');
    }
    expect(targets.addressProblem('93.184.216.34')).toBeNull();
  });

  it('checks what a name resolves to when asked, and connects only to addresses the rules allow', async () => {
    await expect(targets.checkResolved('https://hooks.example.com/gpumesh/x')).resolves.toBe('https://hooks.example.com/gpumesh/x');
    const smuggling = new WebhookTargets({ ...rules(), allow: ['https://evil.example.com/'] }, resolver({ 'evil.example.com': ['10.1.2.3'] }));
    await expect(smuggling.checkResolved('https://evil.example.com/x')).rejects.toMatchObject({ code: 'WEBHOOK_NOT_ALLOWED', params: { rule: 'webhooks.allowPrivate' } });
    const looked = await new Promise<{ error: NodeJS.ErrnoException | null; address: unknown }>((resolve) => {
      smuggling.lookup('evil.example.com', {}, (error, address) => resolve({ error, address }));
    });
    expect(looked.error?.message).toMatch(/evil\.example\.com resolves to 10\.1\.2\.3: refused by webhooks\.allowPrivate/);
    // A name with an allowed and a private address: only the allowed one is offered to connect to.
    const mixed = new WebhookTargets(rules(), resolver({ 'both.example.com': ['192.168.0.9', '93.184.216.34'] }));
    const all = await new Promise<unknown>((resolve) => mixed.lookup('both.example.com', { all: true }, (_error, addresses) => resolve(addresses)));
    expect(all).toEqual([{ address: '93.184.216.34', family: 4 }]);
  });
});

describe('signatures', () => {
  it('are Standard Webhooks v1: HMAC-SHA256 of id.timestamp.body under the secret\'s bytes, one secret per URL', () => {
    const root = new Uint8Array(32).fill(7);
    const secret = webhookSecret(root, 'https://hooks.example.com/a');
    expect(secret).toMatch(/^whsec_[A-Za-z0-9+/]{43}=$/);
    expect(webhookSecret(root, 'https://hooks.example.com/a')).toBe(secret);
    expect(webhookSecret(root, 'https://hooks.example.com/b')).not.toBe(secret);
    // The example of the spec's shape, checked by the receiver's rule.
    const signature = signWebhook(secret, 'wh_1', 1_700_000_000, '{"a":1}');
    expect(signature).toMatch(/^v1,[A-Za-z0-9+/]{43}=$/);
    const headers = { id: 'wh_1', timestamp: '1700000000', signature: `v1a,xyz ${signature}` };
    expect(verifyWebhook(secret, headers, '{"a":1}', 1_700_000_100)).toBe(true);
    expect(verifyWebhook(secret, headers, '{"a":2}', 1_700_000_100)).toBe(false);
    expect(verifyWebhook(secret, headers, '{"a":1}', 1_700_001_000)).toBe(false);
    expect(verifyWebhook(webhookSecret(root, 'https://hooks.example.com/b'), headers, '{"a":1}', 1_700_000_100)).toBe(false);
  });
});
