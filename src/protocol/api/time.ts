import { z } from 'zod';

/** A moment in an answer: ISO 8601, UTC (`2024-05-01T12:00:00.000Z`). */
export const Time = z.string().describe('an ISO 8601 time, UTC');
