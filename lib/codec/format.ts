/**
 * What an Arrow C data interface format string means for a column's layout.
 * Mirrors gpr_format_parse in interop/include/gpuring/format.h rule for rule.
 */
export type LayoutClass = 'fixed' | 'bool' | 'varbin' | 'list' | 'fixed-list' | 'struct';

export interface FormatInfo {
  layout: LayoutClass;
  /** fixed: bits per element. */
  bitWidth: number;
  /** varbin, list: bytes per offset (4 or 8). */
  offsetBytes: number;
  /** fixed-list: elements per list. */
  listSize: number;
  /** Buffers per node, Arrow order. */
  buffers: number;
  /** Required number of children; -1 any. */
  children: number;
  /** Usable as dictionary indices. */
  isInteger: boolean;
}

const INTS = 'cCsSiIlL';

function info(layout: LayoutClass, bitWidth: number, buffers: number, children: number, extra: Partial<FormatInfo> = {}): FormatInfo {
  return { layout, bitWidth, offsetBytes: 0, listSize: 0, buffers, children, isInteger: false, ...extra };
}

/** A decimal number without sign or leading zeros, at most `max`. */
function decimalUint(s: string, max: number): number | null {
  if (!/^(0|[1-9][0-9]{0,9})$/.test(s)) return null;
  const v = Number(s);
  return v <= max ? v : null;
}

function parseDecimal(s: string): FormatInfo | null {
  const parts = s.slice(2).split(',');
  if (parts.length < 2 || parts.length > 3) return null;
  const precision = decimalUint(parts[0]!, 76);
  const scale = decimalUint(parts[1]!.startsWith('-') ? parts[1]!.slice(1) : parts[1]!, 76);
  const width = parts.length === 3 ? decimalUint(parts[2]!, 256) : 128;
  if (precision === null || scale === null || width === null) return null;
  if ((width !== 128 && width !== 256) || precision < 1 || (width === 128 && precision > 38)) return null;
  return info('fixed', width, 2, 0);
}

function parseTemporal(s: string): FormatInfo | null {
  if (/^td[Dm]$/.test(s)) return info('fixed', s[2] === 'D' ? 32 : 64, 2, 0);
  if (/^tt[smun]$/.test(s)) return info('fixed', s[2] === 's' || s[2] === 'm' ? 32 : 64, 2, 0);
  if (/^ts[smun]:/s.test(s)) return info('fixed', 64, 2, 0);
  if (/^tD[smun]$/.test(s)) return info('fixed', 64, 2, 0);
  return null;
}

function parseNested(s: string): FormatInfo | null {
  if (s === '+l' || s === '+L') return info('list', 0, 2, 1, { offsetBytes: s === '+l' ? 4 : 8 });
  if (s === '+s') return info('struct', 0, 1, -1);
  if (s.startsWith('+w:')) {
    const n = decimalUint(s.slice(3), 0x7fffffff);
    return n ? info('fixed-list', 0, 1, 1, { listSize: n }) : null;
  }
  return null;
}

/** Layout of a format string, or null if gpuring does not carry it. */
export function parseFormat(s: string): FormatInfo | null {
  if (s.length === 1) {
    const i = INTS.indexOf(s);
    if (i >= 0) return info('fixed', 8 << (i >> 1), 2, 0, { isInteger: true });
    if (s === 'e' || s === 'f' || s === 'g') return info('fixed', { e: 16, f: 32, g: 64 }[s], 2, 0);
    if (s === 'b') return info('bool', 1, 2, 0);
    if ('zuZU'.includes(s)) return info('varbin', 8, 3, 0, { offsetBytes: s === 'z' || s === 'u' ? 4 : 8 });
    return null;
  }
  if (s.startsWith('w:')) {
    const n = decimalUint(s.slice(2), 0x0fffffff);
    return n ? info('fixed', n * 8, 2, 0) : null;
  }
  if (s.startsWith('d:')) return parseDecimal(s);
  if (s[0] === 't') return parseTemporal(s);
  if (s[0] === '+') return parseNested(s);
  return null;
}
