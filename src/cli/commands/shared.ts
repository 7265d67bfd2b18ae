import type { Command } from 'commander';

/** The options every command that talks to an orchestrator takes. */
export function withClientOptions(command: Command): Command {
  return command
    .option('--url <urls>', 'orchestrator URL, or several comma-separated (orchestrators sharing one store): a request goes to the next when one cannot be reached or is a standby (env GPUMESH_URL)', undefined)
    .option('--grant <grant>', 'grant to use (env GPUMESH_GRANT; default: <data>/admin.grant)')
    .option('--grant-file <path>', 'read the grant from a file')
    .option('--data <dir>', 'data folder of a local mesh (env GPUMESH_HOME; default ./.gpumesh)')
    .option('--tls-ca-fingerprint <sha256>', 'pin the TLS CA of an https mesh when the grant names none (env GPUMESH_TLS_CA_FINGERPRINT; grants of a TLS mesh carry it)');
}
