/**
 * A process's output as lines, for {@link ServerEndpoint.logLines}. Splits on `\r` as well as `\n`
 * (progress bars redraw themselves with `\r`), drops empty lines, and yields a last unterminated
 * line when the stream ends.
 */
export async function* splitLines(stream: AsyncIterable<Buffer | string>): AsyncGenerator<string> {
  let rest = '';
  for await (const chunk of stream) {
    const parts = (rest + chunk.toString()).split(/[\r\n]/);
    rest = parts.pop() ?? '';
    for (const part of parts) if (part) yield part;
  }
  if (rest) yield rest;
}
