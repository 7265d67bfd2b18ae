import { readFileSync } from 'node:fs';
import { parse } from 'yaml';
import { z } from 'zod';
import { familyOf, type ModelManifest } from '../../protocol/index.js';
import { engineDescriptor } from '../../protocol/engines/index.js';
import { builtinModels, type BuiltinModel } from '../../builtin-models/index.js';
import { EngineError } from '../core/engine.js';
import { HostPolicies } from '../host-policy/config.js';

const MODEL_NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$/;

/** The built-in model of this digest, as this agent's own code builds it (once per process, on first need), if any. */
function ownBuiltin(digest: string): BuiltinModel | undefined {
  return builtinModels().find((model) => model.digest === digest);
}

/**
 * A host's own config (`gpumesh agent --config host.yaml`): what its owner lets the mesh run there. Each model it
 * declares, by the name the mesh knows it by, with the settings only a host may give (EngineDescriptor.hostSettingsOf:
 * a command, a server's URL, a working folder, an environment, an API key's variable, …) and any others it wants to
 * hold to its own values (limits, timeouts):
 *
 *     models:
 *       sd-turbo:
 *         settings:
 *           command: sd-server --model ${MODEL_PATH} --port ${PORT}
 *       paint:
 *         settings: { command: [python3, paint.py], cwd: /opt/paint }
 */
export const HostConfigFile = z.strictObject({
  /** When the mesh may use the machine: yield to its owner, keep hours, stay cool (host-policy/config.ts). */
  ...HostPolicies,
  models: z.record(
    z.string(),
    z.strictObject({
      /** The model's settings as this host runs it: laid over what the orchestrator sends, host settings only from here. */
      settings: z.record(z.string(), z.unknown()),
    }),
  ).default({}).superRefine((models, context) => {
    // Said here, naming the key: a record's own key check says only "Invalid key in record".
    for (const name of Object.keys(models)) {
      if (!MODEL_NAME.test(name)) context.addIssue({ code: 'custom', path: [name], message: 'not a model name (letters, digits, ".", "-" and "_", as the mesh names its models)' });
    }
  }),
});
export type HostConfigFile = z.input<typeof HostConfigFile>;

/**
 * What this host runs, as its owner configured it. The orchestrator says which model to load; the host says how:
 * every manifest the agent loads passes through `apply`, which drops the host settings the orchestrator sent (whatever
 * they say) and lays the host's own over the rest. So no orchestrator, and no one holding an admin grant, can make the
 * host run a command, reach a server or read a file its owner did not configure here.
 */
export class HostConfig {
  readonly #models: ReadonlyMap<string, Readonly<Record<string, unknown>>>;
  /** Where it came from, for errors (`/etc/gpumesh/host.yaml`, `mesh.yaml`); null: none given. */
  readonly source: string | null;
  /** When the mesh may use the machine (its owner, its hours, its heat); each absent unless configured. */
  readonly policies: HostPolicies;

  private constructor(models: ReadonlyMap<string, Readonly<Record<string, unknown>>>, source: string | null, policies: HostPolicies = {}) {
    this.#models = models;
    this.source = source;
    this.policies = policies;
  }

  /** A host that declares nothing: it runs data models (ONNX files) only. */
  static none(): HostConfig {
    return new HostConfig(new Map(), null);
  }

  /** From a parsed config (`gpumesh up` hands its own agent the models mesh.yaml declares on this machine). */
  static of(config: HostConfigFile, source: string): HostConfig {
    const parsed = HostConfigFile.safeParse(config);
    if (!parsed.success) {
      throw new Error(`invalid host config ${source}:\n${parsed.error.issues.map((issue) => `  ${issue.path.join('.') || '(top)'}: ${issue.message}`).join('\n')}`);
    }
    const { models, owner, hours, cool, wake, sleep } = parsed.data;
    const policies = { ...(owner ? { owner } : {}), ...(hours ? { hours } : {}), ...(cool ? { cool } : {}), ...(wake ? { wake } : {}), ...(sleep ? { sleep } : {}) };
    return new HostConfig(new Map(Object.entries(models).map(([name, entry]) => [name, entry.settings])), source, policies);
  }

  /** Read a YAML (or JSON) file; an unreadable or invalid one is an error naming the file and each bad field. */
  static load(path: string): HostConfig {
    let text: string;
    try {
      text = readFileSync(path, 'utf8');
    } catch (error) {
      throw new Error(`cannot read the host config ${path}: ${(error as Error).message}`, { cause: error });
    }
    let value: unknown;
    try {
      value = parse(text) ?? {};
    } catch (error) {
      throw new Error(`the host config ${path} is not YAML: ${(error as Error).message}`, { cause: error });
    }
    return HostConfig.of(value as HostConfigFile, path);
  }

  /** The models it declares (in its hello: the router sends a command or server model only where it is declared). */
  get declared(): string[] {
    return [...this.#models.keys()];
  }

  /** The models whose server its owner opened to clients with a grant (`passthrough: true`; in its hello: agent/relay/). */
  get passedThrough(): string[] {
    return [...this.#models].filter(([, settings]) => settings.passthrough === true).map(([name]) => name);
  }

  /** The settings it gives a model it declares, by the model's name; undefined for one it does not. */
  settingsOf(model: string): Readonly<Record<string, unknown>> | undefined {
    return this.#models.get(model);
  }

  /**
   * The manifest as this host runs it: the orchestrator's settings without their host settings, this host's own laid
   * over them. A model whose engine runs only where it is declared (a command, a server) and that this host does not
   * declare cannot run here: ENGINE_FAILED (retryable: a host that declares it can).
   */
  apply(manifest: ModelManifest): ModelManifest {
    const descriptor = engineDescriptor(manifest.engine);
    const sent = manifest.settings ?? {};
    const foreign = new Set(descriptor?.hostSettingsOf(sent) ?? []);
    // gpumesh's own built-in models are this host's code too, not a model author's: what their definition asks for
    // stands (the built-in `simple` answers in microseconds in the agent's own process). Known by their bytes' digest,
    // which this agent computes from its own code, never by what the orchestrator says.
    if (foreign.has('process') && ownBuiltin(manifest.digest)?.inAgentProcess) foreign.delete('process');
    const own = this.#models.get(familyOf(manifest.name));
    if (!own && descriptor?.hostDeclared) {
      throw new EngineError('ENGINE_FAILED', `model "${manifest.name}" (${manifest.engine}) is not declared in this host's config${this.source ? ` (${this.source})` : ' (none given: gpumesh agent --config <host.yaml>)'}: `
        + `a ${manifest.engine} model runs only where the host's owner declared its ${descriptor.server ? 'server (settings.url or settings.command)' : 'command'}`, true);
    }
    if (foreign.size === 0 && !own) return manifest;
    const kept = Object.fromEntries(Object.entries(sent).filter(([key]) => !foreign.has(key)));
    return { ...manifest, settings: { ...kept, ...own } };
  }
}
