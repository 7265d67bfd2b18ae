import type { Command, HelpConfiguration } from 'commander';

/**
 * One `--help` layout for every command: a command's line in its parent's list is its summary — its `.summary()`,
 * else the first line of its description — wrapped to the width like every other item; its own `--help` shows the
 * whole description. (Commander lists the whole description otherwise, and leaves one that has an indented line
 * unwrapped, so a long description ran across the column layout.)
 */
const HELP_LAYOUT: HelpConfiguration = {
  subcommandDescription: (command) => command.summary() || (command.description().split('\n')[0] ?? ''),
  boxWrap: (text, width) => wrapParagraphs(text, width),
};

/** Characters as a terminal shows them (`…` is one). */
const widthOf = (text: string): number => Array.from(text).length;

/**
 * Wrap text to `width`: consecutive plain lines are one paragraph, wrapped at spaces; a blank line ends one; an
 * indented line (a command to copy, say) is kept whole on its own line.
 */
export function wrapParagraphs(text: string, width: number): string {
  if (width < 40) return text;
  const out: string[] = [];
  let words: string[] = [];
  const flush = (): void => {
    let line = '';
    for (const word of words) {
      if (line && widthOf(line) + 1 + widthOf(word) > width) {
        out.push(line);
        line = word;
      } else line = line ? `${line} ${word}` : word;
    }
    if (line) out.push(line);
    words = [];
  };
  for (const line of text.split(/\r?\n/)) {
    if (line.trim() === '') {
      flush();
      out.push('');
    } else if (/^\s/.test(line)) {
      flush();
      out.push(line);
    } else words.push(...line.split(/\s+/).filter(Boolean));
  }
  flush();
  return out.join('\n');
}

/** Apply the layout to a command and all its subcommands (commander copies help settings only to `.command()`s). */
export function applyHelpLayout(command: Command): void {
  command.configureHelp(HELP_LAYOUT);
  for (const sub of command.commands) applyHelpLayout(sub);
}
