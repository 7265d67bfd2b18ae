import { describe, expect, it } from 'vitest';
import { Hours } from '../../../src/agent/host-policy/hours.js';

// 2026-12-05 is a Saturday; these moments are UTC.
const at = (text: string): number => Date.parse(`${text}Z`);

describe('a host\'s hours', () => {
  it('a range past midnight opens in the evening and closes the next morning', () => {
    const hours = new Hours(['22:00-08:00'], 'UTC');
    expect(hours.isOpen(at('2026-12-07T21:59:00'))).toBe(false);
    expect(hours.isOpen(at('2026-12-07T22:00:00'))).toBe(true);
    expect(hours.isOpen(at('2026-12-08T07:59:00'))).toBe(true);
    expect(hours.isOpen(at('2026-12-08T08:00:00'))).toBe(false);
    expect(hours.nextChange(at('2026-12-07T12:00:00'))).toBe(at('2026-12-07T22:00:00'));
    expect(hours.describe(at('2026-12-07T22:00:00'))).toBe('Mon 22:00');
  });

  it('whole days and day ranges, in the host\'s own time zone', () => {
    const weekend = new Hours(['sat', 'sun'], 'UTC');
    expect(weekend.isOpen(at('2026-12-05T00:00:00'))).toBe(true);
    expect(weekend.isOpen(at('2026-12-07T00:00:00'))).toBe(false);
    expect(weekend.nextChange(at('2026-12-07T09:30:00'))).toBe(at('2026-12-12T00:00:00'));
    const evenings = new Hours(['mon-fri 18:00-23:00'], 'Europe/Berlin');
    // 17:30 UTC on a Monday is 18:30 in Berlin in December (UTC+1).
    expect(evenings.isOpen(at('2026-12-07T17:30:00'))).toBe(true);
    expect(evenings.isOpen(at('2026-12-05T17:30:00'))).toBe(false);
    expect(new Hours(['always']).nextChange(Date.now())).toBeNull();
  });

  it('refuses what it cannot read, naming the entry', () => {
    expect(() => new Hours(['25:00-08:00'])).toThrow('"25:00-08:00": "25:00" is not a time of day');
    expect(() => new Hours(['funday'])).toThrow('"funday": "funday" is not a day');
    expect(() => new Hours(['10:00-10:00'])).toThrow('an empty range');
    expect(() => new Hours(['22:00-08:00'], 'Mars/Olympus')).toThrow('"Mars/Olympus" is not a time zone');
    expect(() => new Hours([])).toThrow('lists no window');
  });
});
