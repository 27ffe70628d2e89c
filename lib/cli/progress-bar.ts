/**
 * Progress of long CLI work on stderr: one bar redrawn in place on a terminal;
 * on anything else (a log, a pipe) a plain line when a step starts and at each
 * quarter, so logs stay short. Silent with --json, whose stdout is the result.
 */
const WIDTH = 30;

export class ProgressBar {
  readonly #stream: NodeJS.WriteStream;
  readonly #enabled: boolean;
  readonly #tty: boolean;
  #label = '';
  #quarter = -1;
  #drawn = false;

  constructor(stream: NodeJS.WriteStream, json: boolean) {
    this.#stream = stream;
    this.#enabled = !json;
    this.#tty = Boolean(stream.isTTY);
  }

  /** `done` of `total` in the step called `label`. */
  update(label: string, done: number, total: number): void {
    if (!this.#enabled) return;
    const fraction = total ? Math.min(1, done / total) : 1;
    if (this.#tty) {
      const filled = Math.round(fraction * WIDTH);
      this.#stream.write(`\r\x1b[2K[${'#'.repeat(filled)}${'.'.repeat(WIDTH - filled)}] ${String(Math.floor(fraction * 100)).padStart(3)}%  ${label} ${done}/${total}`);
      this.#drawn = true;
      return;
    }
    const quarter = Math.floor(fraction * 4);
    if (label === this.#label && quarter === this.#quarter) return;
    if (label !== this.#label) this.#quarter = -1;
    [this.#label, this.#quarter] = [label, quarter];
    this.#stream.write(`  ${label}: ${done}/${total}\n`);
  }

  /** Ends the bar's line, so that what follows starts on a line of its own. */
  finish(): void {
    if (this.#drawn) this.#stream.write('\n');
    this.#drawn = false;
  }
}
