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
import { makeOutput, type Output } from './output.js';

const USAGE = `usage: gpuring <command> [options]

  create NAME [--slots N] [--participants N] [--mode 0600]   create a ring
  inspect NAME                                               header, participants, occupancy, leases
  rm NAME                                                    remove a ring and its arenas
  demo [--frames N] [--rows N] [--device N]                  stream verified tables between two processes
                                                             (--device: as device columns on GPU N)
  doctor                                                     check shared memory, limits and the CUDA driver

  --json    machine-readable output`;

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
      const ring = Ring.create(args[0]!, {
        slots: positiveInt(str('slots'), 1024, '--slots'),
        participants: positiveInt(str('participants'), 64, '--participants'),
        ...(mode ? { mode: parseInt(mode, 8) } : {}),
      });
      const info = ring.inspect();
      ring.close();
      out.result(info, () => formatInspection(info));
      return true;
    }
    case 'inspect':
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
      process.stderr.write(`${USAGE}\n`);
      return command === undefined || command === 'help';
  }
}

/** Runs the CLI; resolves to the process exit code. */
export async function run(argv: string[]): Promise<number> {
  let json = false;
  try {
    const { values, positionals } = parseArgs({
      args: argv,
      allowPositionals: true,
      options: {
        json: { type: 'boolean' },
        slots: { type: 'string' },
        participants: { type: 'string' },
        mode: { type: 'string' },
        frames: { type: 'string' },
        rows: { type: 'string' },
        device: { type: 'string' },
      },
    });
    json = values.json ?? false;
    const [command, ...args] = positionals;
    if (['create', 'inspect', 'rm'].includes(command ?? '') && !args[0]) throw new GpuringError('INVALID_ARGUMENT', `${command} needs a ring NAME`);
    return (await dispatch(command, args, makeOutput(json), values)) ? 0 : 1;
  } catch (error) {
    const e = error as Error & { code?: string };
    if (json) process.stdout.write(`${JSON.stringify({ error: { code: e.code ?? 'ERROR', message: e.message } })}\n`);
    else process.stderr.write(`gpuring: ${e.code ? `${e.code}: ` : ''}${e.message}\n`);
    return 2;
  }
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  process.exitCode = await run(process.argv.slice(2));
}
