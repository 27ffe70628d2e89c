/**
 * What the `gpuring` command line accepts: each command's arguments, options
 * and help. main.ts parses against this table, so `--help` and the errors for
 * unknown commands and options always agree with what is accepted.
 */
export interface CommandSpec {
  /** Arguments after the command, as shown in usage. */
  args: string;
  /** One line for the command list. */
  summary: string;
  /** Options taking a value (without --json and --help): the value's name and what the option does. */
  options: Record<string, [string, string]>;
  /** Options taking no value. */
  flags?: Record<string, string>;
  /** A positional NAME is required. */
  needsName?: boolean;
  /** Internal commands (the demo's child processes) are not listed. */
  hidden?: boolean;
}

export const COMMANDS: Record<string, CommandSpec> = {
  create: {
    args: 'NAME',
    summary: 'create a ring',
    needsName: true,
    options: {
      slots: ['N', 'frames the ring holds at once, a power of two (default 1024)'],
      participants: ['N', 'producers and consumers attached at once (default 64)'],
      mode: ['OCTAL', 'file mode of the segment and the arenas (default 0600)'],
      delivery: ['each|all', "'each' frame to one consumer (default), or 'all' subscribers get every frame (broadcast, at most 64 participants)"],
    },
    flags: { 'if-missing': 'succeed, leaving it as it is, when the ring already exists' },
  },
  inspect: {
    args: 'NAME',
    summary: 'header, participants, occupancy, leases; --watch: live, every second',
    needsName: true,
    options: { interval: ['MS', 'with --watch: milliseconds between views (default 1000)'], count: ['N', 'with --watch: stop after N views'] },
    flags: { watch: 'redraw a live view: frames/s in and out, occupancy, leases and their age, the slot that holds the ring up' },
  },
  rm: { args: 'NAME', summary: 'remove a ring and its arenas', needsName: true, options: {} },
  demo: {
    args: '',
    summary: 'stream verified tables between two processes; reports speed and verification apart',
    options: {
      frames: ['N', 'frames to send (default 1000)'],
      rows: ['N', 'rows per frame (default 1000)'],
      device: ['N', 'publish device columns on GPU N'],
    },
  },
  doctor: { args: '', summary: 'check shared memory, limits, the addon and the CUDA driver', options: {} },
  'demo-producer': { args: 'NAME FRAMES ROWS DEVICE', summary: '', options: {}, hidden: true },
  'demo-consumer': { args: 'NAME FRAMES ROWS', summary: '', options: {}, hidden: true },
};

const COMMON: [string, string][] = [
  ['--json', 'machine-readable output'],
  ['-h, --help', 'this help'],
];

/** Option names and descriptions in two aligned columns. */
function columns(rows: [string, string][]): string[] {
  const width = Math.max(...rows.map(([left]) => left.length));
  return rows.map(([left, right]) => `  ${left.padEnd(width)}   ${right}`);
}

function optionRows(spec: CommandSpec): [string, string][] {
  const valued = Object.entries(spec.options).map(([name, [arg, text]]): [string, string] => [`--${name} ${arg}`, text]);
  const flags = Object.entries(spec.flags ?? {}).map(([name, text]): [string, string] => [`--${name}`, text]);
  return [...valued, ...flags, ...COMMON];
}

/** The list of commands. */
export function usage(): string {
  const visible = Object.entries(COMMANDS).filter(([, s]) => !s.hidden);
  const commands = columns(visible.map(([n, s]): [string, string] => [`${n} ${s.args}`, s.summary]));
  return `usage: gpuring <command> [options]\n\n${commands.join('\n')}\n\n${columns(COMMON).join('\n')}\n\n'gpuring <command> --help' lists a command's options.`;
}

/** One command's help. */
export function commandHelp(command: string): string {
  const spec = COMMANDS[command]!;
  return [`usage: gpuring ${command}${spec.args ? ` ${spec.args}` : ''} [options]`, '', spec.summary, '', ...columns(optionRows(spec))].join('\n');
}
