/**
 * A host's hours (`hours.available` in its config): when it takes work, in its own time zone. Each entry is a time
 * range every day (`22:00-08:00`, which runs past midnight into the next day), one or more days whole (`sat`,
 * `sat,sun`, `mon-fri`), or days with a range (`mon-fri 18:00-23:00`); `always` is every moment. The host is open
 * when any entry says so.
 */
const DAYS = ['sun', 'mon', 'tue', 'wed', 'thu', 'fri', 'sat'] as const;
const DAY_MINUTES = 24 * 60;

interface Window {
  /** The days it opens on (0 = Sunday); all seven for a range alone. */
  days: ReadonlySet<number>;
  /** Minutes after midnight; `to` ≤ `from` runs past midnight, and `to` 1440 is the day's end. */
  from: number;
  to: number;
}

function dayIndex(name: string, entry: string): number {
  const index = DAYS.indexOf(name.toLowerCase() as (typeof DAYS)[number]);
  if (index < 0) throw new Error(`"${entry}": "${name}" is not a day (${DAYS.join(', ')})`);
  return index;
}

function parseDays(text: string, entry: string): Set<number> {
  const days = new Set<number>();
  for (const part of text.split(',')) {
    const [first, last] = part.split('-');
    const start = dayIndex(first!, entry);
    if (last === undefined) {
      days.add(start);
      continue;
    }
    // mon-fri; fri-mon wraps past the week's end.
    for (let day = start, end = dayIndex(last, entry); ; day = (day + 1) % 7) {
      days.add(day);
      if (day === end) break;
    }
  }
  return days;
}

function parseTime(text: string, entry: string): number {
  const match = /^(\d{1,2}):(\d{2})$/.exec(text);
  const minutes = match ? Number(match[1]) * 60 + Number(match[2]) : NaN;
  if (!match || Number(match[2]) > 59 || minutes > DAY_MINUTES) throw new Error(`"${entry}": "${text}" is not a time of day (HH:MM, 00:00 to 24:00)`);
  return minutes;
}

function parseEntry(entry: string): Window {
  const text = entry.trim();
  const ALL = new Set([0, 1, 2, 3, 4, 5, 6]);
  if (text.toLowerCase() === 'always') return { days: ALL, from: 0, to: DAY_MINUTES };
  const [first, second, ...rest] = text.split(/\s+/);
  if (rest.length > 0 || !first) throw new Error(`"${entry}": an entry is a time range (22:00-08:00), days (sat, mon-fri) or both (mon-fri 18:00-23:00)`);
  const isRange = (part: string): boolean => /^\d/.test(part);
  if (second === undefined) {
    if (!isRange(first)) return { days: parseDays(first, entry), from: 0, to: DAY_MINUTES };
    return { days: ALL, ...parseRange(first, entry) };
  }
  return { days: parseDays(first, entry), ...parseRange(second, entry) };
}

function parseRange(text: string, entry: string): { from: number; to: number } {
  const [from, to, extra] = text.split('-');
  if (from === undefined || to === undefined || extra !== undefined) throw new Error(`"${entry}": a time range is HH:MM-HH:MM`);
  const range = { from: parseTime(from, entry), to: parseTime(to, entry) };
  if (range.from === range.to) throw new Error(`"${entry}": an empty range (use "always" for every moment)`);
  return range;
}

/** The local weekday and minute of a moment in a time zone. */
type LocalTime = { day: number; minute: number };

export class Hours {
  readonly #windows: readonly Window[];
  readonly #format: Intl.DateTimeFormat;
  readonly timeZone: string;

  /** Throws, naming the entry, on one it cannot read, and on an unknown time zone. */
  constructor(entries: readonly string[], timeZone?: string) {
    if (entries.length === 0) throw new Error('hours.available lists no window');
    this.#windows = entries.map(parseEntry);
    try {
      this.#format = new Intl.DateTimeFormat('en-US', { timeZone, weekday: 'short', hour: '2-digit', minute: '2-digit', hourCycle: 'h23' });
    } catch {
      throw new Error(`hours.timeZone: "${timeZone}" is not a time zone this system knows (e.g. Europe/Berlin, America/New_York)`);
    }
    this.timeZone = this.#format.resolvedOptions().timeZone;
  }

  #local(at: number): LocalTime {
    let day = 0;
    let hour = 0;
    let minute = 0;
    for (const part of this.#format.formatToParts(at)) {
      if (part.type === 'weekday') day = DAYS.indexOf(part.value.toLowerCase().slice(0, 3) as (typeof DAYS)[number]);
      else if (part.type === 'hour') hour = Number(part.value);
      else if (part.type === 'minute') minute = Number(part.value);
    }
    return { day, minute: hour * 60 + minute };
  }

  /** Whether the host takes work at `at` (epoch ms). */
  isOpen(at: number): boolean {
    const { day, minute } = this.#local(at);
    const yesterday = (day + 6) % 7;
    return this.#windows.some((window) => (window.from < window.to
      ? window.days.has(day) && minute >= window.from && minute < window.to
      : (window.days.has(day) && minute >= window.from) || (window.days.has(yesterday) && minute < window.to)));
  }

  /**
   * The next moment after `at` when it opens or closes (whichever it is not now), to the minute; null when that never
   * happens (`always`, or hours that never open). Found by walking the week a minute at a time: a time zone's clock
   * changes (summer time) are then the system's business, not this code's.
   */
  nextChange(at: number): number | null {
    const open = this.isOpen(at);
    const start = Math.floor(at / 60_000) * 60_000 + 60_000;
    for (let moment = start; moment <= start + 8 * DAY_MINUTES * 60_000; moment += 60_000) {
      if (this.isOpen(moment) !== open) return moment;
    }
    return null;
  }

  /** A moment as the host's owner reads it: `Sat 22:00` in its time zone. */
  describe(at: number): string {
    const { day, minute } = this.#local(at);
    const pad = (value: number): string => String(value).padStart(2, '0');
    return `${DAYS[day]![0]!.toUpperCase()}${DAYS[day]!.slice(1)} ${pad(Math.floor(minute / 60))}:${pad(minute % 60)}`;
  }
}
