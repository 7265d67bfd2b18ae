#!/usr/bin/env node
// The netns scenario's stand-in for video work: the model `clip` (engine exec, job type tensor) that the
// scenario's mesh.yaml routes to the `video` class. A real video job renders frames for seconds; this one holds
// its batch for `x[0]` milliseconds (at most 5000) and writes one small file per job, so a host can be killed
// while it holds a batch. The orchestrator sees an ordinary exec model: one process per batch (`batch: true`).
//
// stdin: {"jobs": [{"id", "input": {"x": [workMs, seed]}, "outputDir"}, …]}; writes <outputDir>/clip.json.
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

const { jobs } = JSON.parse(readFileSync(0, 'utf8'));
const workMs = Math.min(5000, Math.max(0, ...jobs.map((job) => Number(job.input.x?.[0]) || 0)));
const steps = 4;
for (let step = 1; step <= steps; step++) {
  await new Promise((resolve) => setTimeout(resolve, workMs / steps));
  process.stdout.write(`${JSON.stringify({ progress: { step, total: steps } })}\n`);
}
for (const job of jobs) {
  // The bytes depend only on the job, so a job run twice (on two hosts) yields the same digest.
  writeFileSync(join(job.outputDir, 'clip.json'), JSON.stringify({ clip: job.id, seed: job.input.x?.[1] ?? 0, frames: steps }));
}
