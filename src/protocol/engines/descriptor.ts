import type { z } from 'zod';

/**
 * Text in a client's input that an engine would read as an instruction rather than as words: sd.cpp's
 * `<sd_cpp_extra_args>` block (its JSON is laid over the request), a LoRA tag that loads a file, ComfyUI's
 * `embedding:` names. Each engine lists its own; a job whose text carries one is refused at admission (400
 * INVALID_INPUT naming the field and the markup) and again by the engine on the agent, so the only parameters an
 * engine receives are the validated ones and the stored input says what ran.
 */
export interface ControlMarkup {
  /** The markup as a person would recognise it, for the error (`<sd_cpp_extra_args>`). */
  readonly name: string;
  readonly pattern: RegExp;
  /** What the engine would do with it, for the error ("sd-server lays its JSON over the request"). */
  readonly effect: string;
}

/**
 * What the orchestrator and the agent both know about an engine: its name (what a model's `engine` says and an
 * agent's hello lists), the schema of a model's `settings`, what a declared model must name, and the markup its
 * client text may not carry. The agent adds a factory (agent/engines/module.ts); the orchestrator needs nothing more.
 */
export interface EngineDescriptor<Settings extends z.ZodType = z.ZodType> {
  readonly name: string;
  /**
   * The engine's schema for a model's `settings`: the engine validates every manifest with it at load, and the
   * orchestrator validates the models declared in mesh.yaml with it at start, so a bad field is named before any job.
   */
  readonly settings: Settings;
  /**
   * A server engine: each model names the server it talks to (`settings.url`, a server the person runs) or how
   * the agent starts one (`settings.command`). The orchestrator refuses a declared model that names neither.
   */
  readonly server: boolean;
  /** The engine loads a model file (the ONNX engine): the orchestrator refuses a declared model without `file`. */
  readonly needsFile: boolean;
  /**
   * The engine makes clips itself (the ONNX engine's `cppn-video`); a function: whether a model of it does, from its
   * settings (an exec command that writes whole clips, `settings.clips`). Absent or false: a model of it that serves
   * `video` is given its frames one image at a time by the agent (video/frames-from-images.ts), so any image engine
   * makes clips — each frame from the clip's starting picture, where the clip names one and the model takes pictures.
   */
  readonly nativeVideo?: boolean | ((settings: Readonly<Record<string, unknown>>) => boolean);
  /**
   * The engine takes pictures as inputs (`image`, `mask`: image-to-image, OCR); the agent hands it each one decoded.
   * `true`: every model of it takes both; a function: the fields a model takes, from its settings (a ComfyUI workflow
   * takes a picture only where its settings name the node for it). Absent: none. A job that names a picture its model
   * does not take is refused at admission rather than run as if it named none.
   */
  readonly pictureInputs?: boolean | ((settings: Readonly<Record<string, unknown>>) => readonly string[]);
  /**
   * Where `pictureInputs` is a function: what a job naming a picture field its model does not take is told, after
   * `<field>: ` — which setting gives the field a place, and what to do instead.
   */
  readonly pictureRefusal?: (field: string) => string;
  /**
   * The files a model must hold for its settings (the ONNX engine's `ocr` pipeline: `detector`, `recognizer`,
   * `dictionary`): `gpumesh models add` refuses a model that lacks one, naming it, rather than a load failing later.
   * Absent, or empty: one file of any name will do.
   */
  readonly filesFor?: (settings: Record<string, unknown>) => readonly string[];
  /** Markup the engine reads in client text; none: the engine takes text as words (or takes no text). */
  readonly controlMarkup: readonly ControlMarkup[];
  /**
   * The settings that make a host run, reach or read something of its own — a command line, a server's URL, a working
   * folder, an environment, a file of the host's, an API key's variable, the agent's own process — which only the host's
   * own config may give (mesh.yaml on the machine `gpumesh up` runs on, host.yaml on an agent's host): the
   * orchestrator refuses a model added over HTTP that carries one (403 HOST_CONFIG_ONLY), and the agent replaces the
   * manifest's values of them with its own config's, so no orchestrator can make a host run what its owner did not
   * configure there. Lists the keys of `settings` that are such.
   */
  readonly hostSettingsOf: (settings: Readonly<Record<string, unknown>>) => string[];
  /**
   * A model of this engine runs only on hosts whose own config declares it (it needs a command or a server, which only
   * the host may name): the router passes other hosts over (`not configured`).
   */
  readonly hostDeclared: boolean;
  /** The schema a model's settings meet without their host settings, as the orchestrator checks them. Default `settings`. */
  readonly meshSettings?: z.ZodType;
}

/** The keys of `settings` among `keys` that are set: a descriptor's `hostSettingsOf` for settings that are host-only whatever their value. */
export function settingsNamed(keys: readonly string[]): (settings: Readonly<Record<string, unknown>>) => string[] {
  return (settings) => keys.filter((key) => settings[key] !== undefined);
}

/**
 * The first control markup of the engine found in a string field of a job's input, as a sentence for an
 * INVALID_INPUT error (`prompt: contains …`); null when the text is only words. Every string field is looked at,
 * so a text field added to an input schema later is covered without a change here.
 */
export function controlMarkupIn(input: Readonly<Record<string, unknown>>, descriptor: Pick<EngineDescriptor, 'name' | 'controlMarkup'>): string | null {
  if (descriptor.controlMarkup.length === 0) return null;
  for (const [field, value] of Object.entries(input)) {
    if (typeof value !== 'string') continue;
    for (const markup of descriptor.controlMarkup) {
      if (markup.pattern.test(value)) {
        return `${field}: contains ${markup.name}, control markup of the ${descriptor.name} engine (${markup.effect}); remove it`;
      }
    }
  }
  return null;
}

/** Whether a model of the engine makes its clips itself (`nativeVideo`), rather than the agent from its images. */
export function makesClips(descriptor: Pick<EngineDescriptor, 'nativeVideo'>, settings: Readonly<Record<string, unknown>>): boolean {
  return typeof descriptor.nativeVideo === 'function' ? descriptor.nativeVideo(settings) : descriptor.nativeVideo === true;
}
