import { Command, CommanderError } from 'commander';
import { ConfigError, MeshError } from '../protocol/index.js';
import { VERSION } from '../version.js';
import { ApiError } from './common/client.js';
import { agentCommand } from './commands/agent.js';
import { auditCommand } from './commands/audit.js';
import { blobsCommand } from './commands/blobs.js';
import { explainCommand } from './commands/explain.js';
import { grantCommand } from './commands/grant.js';
import { jobsCommand } from './commands/jobs.js';
import { modelsCommand } from './commands/models.js';
import { serveCommand } from './commands/serve.js';
import { statusCommand } from './commands/status.js';
import { submitCommand } from './commands/submit.js';
import { upCommand } from './commands/up.js';
import { applyHelpLayout } from './common/help.js';
import { CliError } from './common/output.js';

const program = new Command('gpumesh')
  .description('A self-hosted GPU inference mesh: one orchestrator, an agent on every GPU host, capability-scoped jobs.')
  .version(VERSION)
  .showHelpAfterError()
  // A subcommand's options are its own (`gpumesh agent drain --data …` is drain's --data, not agent's).
  .enablePositionalOptions()
  .exitOverride();

for (const command of [upCommand(), serveCommand(), agentCommand(), submitCommand(), statusCommand(), explainCommand(), jobsCommand(), blobsCommand(), grantCommand(), modelsCommand(), auditCommand()]) {
  program.addCommand(command);
}
applyHelpLayout(program);

try {
  await program.parseAsync(process.argv);
} catch (error) {
  if (error instanceof CommanderError) process.exit(error.exitCode);
  const known = error instanceof CliError || error instanceof ApiError || error instanceof ConfigError || error instanceof MeshError;
  process.stderr.write(`gpumesh: ${known ? (error as Error).message : (error as Error).stack ?? String(error)}\n`);
  process.exit(error instanceof CliError ? error.exitCode : 1);
}
