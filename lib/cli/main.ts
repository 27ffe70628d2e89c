/** The `gpuring` command line. */
import { readdirSync } from 'node:fs';
import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import { GpuringError } from '../errors.js';
import { parseSegmentName } from '../options.js';
import { Ring } from '../ring.js';
import { demoCommand, demoConsumer, demoProducer } from './demo.js';
import { doctorCommand } from './doctor.js';
import { formatInspection, inspectCommand } from './inspect.js';
import { watchCommand } from './inspect-watch.js';
import { commandHelp, COMMANDS, usage } from './commands.js';
import { makeOutput, type Output } from './output.js';

function integer(value: string | undefined, fallback: number, what: string, min: 0 | 1): number {
  if (value === undefined) return fallback;
  const n = Number(value);
  if (!Number.isSafeInteger(n) || n < min) throw new GpuringError('INVALID_ARGUMENT', `${what} must be a ${min ? 'positive' : 'non-negative'} integer, not '${value}'`);
  return n;
}

const positiveInt = (value: string | undefined, fallback: number, what: string) => integer(value, fallback, what, 1);

/** Removes the segment and every arena named after it (also arenas left behind by a segment already gone). */
function removeRing(name: string, out: Output): void {
  const n = parseSegmentName(name);
  const arenas = readdirSync('/dev/shm').filter((f) => new RegExp(`^gpuring\\.${n}\\.p\\d+g\\d+\\.a\\d+$`).test(f)).length;
  Ring.unlink(n);
  out.result({ removed: n, arenas }, () => `removed ring ${n} and ${arenas} arena(s)`);
}

async function dispatch(command: string | undefined, args: string[], out: Output, values: Record<string, string | boolean | undefined>): Promise<boolean> {
  const str = (k: string) => values[k] as string | undefined;
  switch (command) {
    case 'create': {
      const mode = str('mode');
      const delivery = str('delivery') ?? 'each';
      if (delivery !== 'each' && delivery !== 'all') throw new GpuringError('INVALID_ARGUMENT', `--delivery is 'each' or 'all', not '${delivery}'`);
      const ring = Ring.create(args[0]!, {
        slots: positiveInt(str('slots'), 1024, '--slots'),
        participants: positiveInt(str('participants'), 64, '--participants'),
        ...(mode ? { mode: parseInt(mode, 8) } : {}),
        delivery,
        ifExists: values['if-missing'] ? 'open' : 'fail',
      });
      const info = ring.inspect();
      ring.close();
      out.result(info, () => formatInspection(info));
      return true;
    }
    case 'inspect':
      if (values.watch) return watchCommand(args[0]!, positiveInt(str('interval'), 1000, '--interval'), positiveInt(str('count'), Infinity, '--count'), out);
      inspectCommand(args[0]!, out);
      return true;
    case 'rm':
      removeRing(args[0]!, out);
      return true;
    case 'doctor':
      return doctorCommand(out);
    case 'demo':
      return demoCommand(positiveInt(str('frames'), 1000, '--frames'), positiveInt(str('rows'), 1000, '--rows'), integer(str('device'), -1, '--device', 0), out);
    case 'demo-producer':
      await demoProducer(args[0]!, Number(args[1]), Number(args[2]), Number(args[3]));
      return true;
    case 'demo-consumer':
      await demoConsumer(args[0]!, Number(args[1]), Number(args[2]));
      return true;
    default:
      throw new GpuringError('INVALID_ARGUMENT', `unknown command '${command}'`);
  }
}

/** The command: the first argument that is neither an option nor an option's value. */
function commandOf(argv: string[]): string | undefined {
  const { tokens } = parseArgs({ args: argv, strict: false, allowPositionals: true, tokens: true });
  const first = tokens.find((t) => t.kind === 'positional');
  return first?.kind === 'positional' ? first.value : undefined;
}

/** Parses `argv` against the command's own options; an unknown one is a usage error naming the command's help. */
function parseCommand(command: string, argv: string[]) {
  const spec = COMMANDS[command]!;
  const options: Record<string, { type: 'string' | 'boolean'; short?: string }> = { json: { type: 'boolean' }, help: { type: 'boolean', short: 'h' } };
  for (const name of Object.keys(spec.options)) options[name] = { type: 'string' };
  for (const name of Object.keys(spec.flags ?? {})) options[name] = { type: 'boolean' };
  try {
    return parseArgs({ args: argv, allowPositionals: true, options });
  } catch (error) {
    const detail = (error as Error).message.split('. ')[0];
    throw new GpuringError('INVALID_ARGUMENT', `${detail} (see 'gpuring ${command} --help')`);
  }
}

/** Runs the CLI; resolves to the process exit code. */
export async function run(argv: string[]): Promise<number> {
  const json = argv.includes('--json');
  try {
    const command = commandOf(argv);
    if (command === undefined || command === 'help') {
      const topic = command && commandOf(argv.slice(argv.indexOf('help') + 1));
      if (topic && !COMMANDS[topic]) throw new GpuringError('INVALID_ARGUMENT', `unknown command '${topic}'`);
      process.stdout.write(`${topic ? commandHelp(topic) : usage()}\n`);
      return command === undefined && !argv.some((a) => a === '--help' || a === '-h') ? 1 : 0;
    }
    if (!COMMANDS[command]) throw new GpuringError('INVALID_ARGUMENT', `unknown command '${command}'`);
    const { values, positionals } = parseCommand(command, argv);
    if (values.help) {
      process.stdout.write(`${commandHelp(command)}\n`);
      return 0;
    }
    const args = positionals.slice(1);
    if (COMMANDS[command]!.needsName && !args[0]) throw new GpuringError('INVALID_ARGUMENT', `${command} needs a ring NAME (see 'gpuring ${command} --help')`);
    return (await dispatch(command, args, makeOutput(json), values)) ? 0 : 1;
  } catch (error) {
    const e = error as Error & { code?: string };
    if (json) process.stdout.write(`${JSON.stringify({ error: { code: e.code ?? 'ERROR', message: e.message } })}\n`);
    else process.stderr.write(`gpuring: ${e.code ? `${e.code}: ` : ''}${e.message}\n${/unknown command/.test(e.message) ? `\n${usage()}\n` : ''}`);
    return 2;
  }
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  process.exitCode = await run(process.argv.slice(2));
}
