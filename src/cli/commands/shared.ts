import type { Command } from 'commander';
import { dataDirHelp } from '../common/data-folder.js';
import type { MeshClient } from '../common/client.js';
import { printJson } from '../common/output.js';
import { clientFrom, type ClientOptions } from '../common/settings.js';

/** The options every command that talks to an orchestrator takes. */
export function withClientOptions(command: Command): Command {
  return command
    .option('--url <urls>', 'orchestrator URL, or several comma-separated (orchestrators sharing one store): a request goes to the next when one cannot be reached or is a standby (env GPUMESH_URL)', undefined)
    .option('--grant <grant>', 'grant to use (env GPUMESH_GRANT; default: <data>/admin.grant)')
    .option('--grant-file <path>', 'read the grant from a file')
    .option('--data <dir>', `data folder of a local mesh (${dataDirHelp()})`)
    .option('--tls-ca-fingerprint <sha256>', 'pin the TLS CA of an https mesh when the grant names none (env GPUMESH_TLS_CA_FINGERPRINT; grants of a TLS mesh carry it)');
}

/**
 * The action of a command that asks the orchestrator once per argument, in turn (`jobs delete-results <id...>`,
 * `blobs rm <digest...>`): with `--json` the answers as one list, else a line each. `what` names an argument in the
 * option's help.
 */
export function askEach<T>(command: Command, what: string, ask: (client: MeshClient, item: string) => Promise<T>, line: (answer: T) => string): Command {
  return command
    .option('--json', `print JSON, one answer per ${what}`)
    .action(async (items: string[], options: ClientOptions & { json?: boolean }) => {
      const client = clientFrom(options);
      const answers: T[] = [];
      for (const item of items) answers.push(await ask(client, item));
      if (options.json) return printJson(answers);
      for (const answer of answers) process.stdout.write(`${line(answer)}\n`);
    });
}
