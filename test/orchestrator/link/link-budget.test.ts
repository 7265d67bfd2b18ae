import { describe, expect, it } from 'vitest';
import { LinkBudget } from '../../../src/orchestrator/link/link-budget.js';

describe('LinkBudget (a link\'s token bucket)', () => {
  const settings = { perSecond: 100, burst: 200, closeAfterMs: 1000 };

  it('lets a burst through, drops beyond it, and closes a link that keeps exceeding it', () => {
    const budget = new LinkBudget(settings, 0);
    for (let i = 0; i < 200; i++) expect(budget.take(0)).toBe('ok');
    expect(budget.take(0)).toBe('over');
    // At 999 ms, 99.9 tokens are back: under half the burst, so the link is still "over since" 0. Spent again, the
    // next message dropped is past closeAfterMs.
    for (let i = 0; i < 99; i++) expect(budget.take(999)).toBe('ok');
    expect(budget.take(999)).toBe('over');
    let verdict = budget.take(1000);
    for (let i = 0; verdict === 'ok' && i < 5; i++) verdict = budget.take(1000); // the token that came back meanwhile
    expect(verdict).toBe('close');
  });

  it('a burst that eases is not closed', () => {
    const budget = new LinkBudget(settings, 0);
    for (let i = 0; i < 201; i++) budget.take(0);
    expect(budget.take(1500)).toBe('ok'); // back to half the burst and more: forgiven
    expect(budget.take(5000)).toBe('ok');
  });

  it('charges refusals as messages: a few are nothing, thousands spend the allowance and close the link', () => {
    const modest = new LinkBudget(settings, 0);
    modest.charge(0, 5);
    expect(modest.take(0)).toBe('ok');

    const hostile = new LinkBudget(settings, 0);
    expect(hostile.take(0)).toBe('ok');
    hostile.charge(0, 1024); // one message naming 1,024 jobs it does not hold
    expect(hostile.take(10)).toBe('over');
    expect(hostile.take(1000)).toBe('close');
  });

  it('bounds the debt to one burst: a link that stops recovers', () => {
    const budget = new LinkBudget(settings, 0);
    budget.charge(0, 1_000_000);
    expect(budget.take(1000)).toBe('close'); // over for closeAfterMs
    const quiet = new LinkBudget(settings, 0);
    quiet.charge(0, 1_000_000);
    // -200 tokens, refilled at 100 a second: at half the burst (100) after 3 s, and forgiven.
    expect(quiet.take(3000)).toBe('ok');
    expect(quiet.take(3001)).toBe('ok');
  });
});
