import { describe, expect, it } from 'vitest';
import { FakeClock } from '../../helpers/fake-clock.js';
import { Deadlines } from '../../../src/orchestrator/jobs/deadlines.js';

function deadlines(clock = new FakeClock(0)) {
  const due: string[] = [];
  const set = new Deadlines<string>(clock, (key) => due.push(`${key}@${clock.now()}`));
  return { clock, due, set };
}

describe('Deadlines', () => {
  it('calls each deadline once, at its time, in time order, with one timer', () => {
    const { clock, due, set } = deadlines();
    set.set('late', 300);
    set.set('early', 100);
    set.set('middle', 200);
    expect(clock.pending()).toBe(1); // moved to the earliest, not one each
    clock.advance(1000);
    expect(due).toEqual(['early@100', 'middle@200', 'late@300']);
    expect(clock.pending()).toBe(0);
  });

  it('a deleted or re-set deadline is not called at its old time; the timer set for it fires and finds nothing', () => {
    const { clock, due, set } = deadlines();
    set.set('a', 100);
    set.set('b', 150);
    set.delete('a');
    set.set('b', 400);
    clock.advance(399);
    expect(due).toEqual([]);
    clock.advance(1);
    expect(due).toEqual(['b@400']);
    set.set('c', 500);
    set.delete('c');
    clock.advance(1000);
    expect(due).toEqual(['b@400']);
    expect(clock.pending()).toBe(0);
  });

  it('a timer that fires before the clock reaches its time is set again for what is left', () => {
    const { clock, due, set } = deadlines(new FakeClock(0, { timersFireEarlyMs: 1 }));
    set.set('a', 100);
    clock.advance(99); // the timer fires at 99
    expect(due).toEqual([]);
    clock.advance(1);
    expect(due).toEqual(['a@100']);
  });

  it('a deadline further away than a Node timer can wait (24.8 days) is reached in steps', () => {
    const fake = new FakeClock(0);
    const asked: number[] = [];
    const clock = { now: () => fake.now(), setTimer: (ms: number, fn: () => void) => (asked.push(ms), fake.setTimer(ms, fn)) };
    const due: string[] = [];
    const set = new Deadlines<string>(clock, (key) => due.push(`${key}@${fake.now()}`));
    const days = 30 * 24 * 3600 * 1000;
    set.set('far', days);
    fake.advance(days);
    expect(due).toEqual([`far@${days}`]);
    expect(asked).toEqual([2 ** 31 - 1, days - (2 ** 31 - 1)]); // Node would run a longer timer after 1 ms
  });

  it('a deadline set while one is being called is kept, even an earlier one', () => {
    const clock = new FakeClock(0);
    const due: string[] = [];
    const set: Deadlines<string> = new Deadlines(clock, (key) => {
      due.push(`${key}@${clock.now()}`);
      if (key === 'first') set.set('again', clock.now() + 10);
    });
    set.set('first', 100);
    set.set('later', 500);
    clock.advance(1000);
    expect(due).toEqual(['first@100', 'again@110', 'later@500']);
  });

  it('close forgets every deadline and stops the timer', () => {
    const { clock, due, set } = deadlines();
    set.set('a', 100);
    set.close();
    expect(clock.pending()).toBe(0);
    clock.advance(1000);
    expect(due).toEqual([]);
  });
});
