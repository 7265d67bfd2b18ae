import { z } from 'zod';
import { Hours } from './hours.js';

/**
 * What a host's owner says of when the mesh may use the machine (the `owner`, `hours` and `cool` sections of its own
 * config, `gpumesh agent --config host.yaml`): a person's computer, not a server. Each section is off unless given.
 *
 *     owner:                     # yield to the person at the machine
 *       gpuMemoryMB: 1024        # other programs hold more than this on a GPU (a game)…
 *       activityCommand: [sh, -c, 'pgrep -x steam']   # …or this exits 0 ("I am using it"), run every checkEveryS
 *       running: finish          # the batches running then: finish (default) or requeue (handed back at once)
 *       unloadWithinS: 30        # the GPU is the owner's (models unloaded) within this long
 *       quietS: 300              # back once the owner has been gone this long
 *     hours:
 *       available: ["22:00-08:00", "sat", "sun"]
 *       timeZone: Europe/Berlin  # default the system's
 *     cool:
 *       temperatureC: 83         # a GPU this hot takes no new batch…
 *       marginC: 5               # …until it is this much cooler
 *       powerW: 300              # likewise for its power draw (marginW, default 20)
 *     wake:
 *       announce: true           # say this host's MAC addresses, so the mesh can wake it (Wake-on-LAN)
 *     sleep:
 *       afterIdleS: 1800         # nothing to do for this long…
 *       command: rtcwake -m mem -s 28800   # …and the host says "asleep", then runs this; links again when it ends
 */
const Command = z.union([z.string().min(1), z.array(z.string().min(1)).min(1)]);

export const OwnerPolicy = z.strictObject({
  gpuMemoryMB: z.number().int().min(1).optional(),
  activityCommand: Command.optional(),
  checkEveryS: z.number().min(1).max(3600).default(10),
  running: z.enum(['finish', 'requeue']).default('finish'),
  unloadWithinS: z.number().min(0).max(3600).default(30),
  quietS: z.number().min(0).max(86_400).default(300),
}).refine((owner) => owner.gpuMemoryMB !== undefined || owner.activityCommand !== undefined, 'say how the owner is noticed: gpuMemoryMB, activityCommand, or both');

export const HoursPolicy = z.strictObject({
  available: z.array(z.string().min(1)).min(1),
  timeZone: z.string().optional(),
}).superRefine((hours, context) => {
  try {
    new Hours(hours.available, hours.timeZone);
  } catch (error) {
    context.addIssue({ code: 'custom', message: (error as Error).message });
  }
});

export const CoolPolicy = z.strictObject({
  temperatureC: z.number().min(30).max(120).optional(),
  marginC: z.number().min(0).max(50).default(5),
  powerW: z.number().min(1).optional(),
  marginW: z.number().min(0).default(20),
}).refine((cool) => cool.temperatureC !== undefined || cool.powerW !== undefined, 'say what is too hot: temperatureC, powerW, or both');

/**
 * Sleep after idle: nothing to do for `afterIdleS`, and the host says it goes to sleep, lets its models go, closes
 * its link and runs `command` (its owner's: a string runs in the system's shell); it links again when that ends.
 */
export const SleepPolicy = z.strictObject({
  afterIdleS: z.number().min(1).max(7 * 86_400),
  command: Command,
});

/** Wake-on-LAN: the host's MAC addresses go in its hello (opt-in), so the orchestrator can wake it while it sleeps. */
export const WakePolicy = z.strictObject({
  announce: z.boolean().default(true),
});

export const HostPolicies = {
  owner: OwnerPolicy.optional(),
  hours: HoursPolicy.optional(),
  cool: CoolPolicy.optional(),
  wake: WakePolicy.optional(),
  sleep: SleepPolicy.optional(),
};
export type OwnerPolicy = z.output<typeof OwnerPolicy>;
export type HoursPolicy = z.output<typeof HoursPolicy>;
export type CoolPolicy = z.output<typeof CoolPolicy>;
export type WakePolicy = z.output<typeof WakePolicy>;
export type SleepPolicy = z.output<typeof SleepPolicy>;
export interface HostPolicies {
  owner?: OwnerPolicy;
  hours?: HoursPolicy;
  cool?: CoolPolicy;
  wake?: WakePolicy;
  sleep?: SleepPolicy;
}
