/**
 * Where things lie in a segment file (SPEC.md §3), by name, from
 * schema/layout.json: for the tests that read raw words of a segment or damage
 * them, so that none of them spells an offset as a bare number.
 */
import { readFileSync } from 'node:fs';

type Struct = { size: number; fields: Record<string, { offset: number; bytes: number }> };
const structs = (JSON.parse(readFileSync(new URL('../../schema/layout.json', import.meta.url), 'utf8')) as { structs: Record<string, Struct> }).structs;

/** The offsets of `fields` of one struct of layout.json, and its size; a field it lacks is a mistake here. */
function struct<const F extends string>(name: string, ...fields: F[]): Record<F, number> & { size: number } {
  const s = structs[name]!;
  const offset = (field: F) => {
    if (!s.fields[field]) throw new Error(`schema/layout.json: ${name} has no field ${field}`);
    return [field, s.fields[field].offset] as const;
  };
  return Object.assign(Object.fromEntries(fields.map(offset)) as Record<F, number>, { size: s.size });
}

export const HEADER = struct('segment_header', 'slot_count', 'slot_size', 'participant_capacity', 'control_offset', 'participants_offset', 'slots_offset');
export const CONTROL = struct('control', 'tail', 'head', 'data_doorbells', 'space_doorbells', 'redeliver', 'subscribers');
export const ENTRY = struct('participant', 'doorbell', 'doorbell_key', 'cursor', 'subscription');
export const SLOT = struct('slot', 'word', 'pending');

/** A segment's geometry, read from its header: where the control block, the entries and the slots start, and how many. */
export function segmentGeometry(header: Buffer) {
  return {
    slotCount: header.readUInt32LE(HEADER.slot_count),
    slotSize: header.readUInt32LE(HEADER.slot_size),
    capacity: header.readUInt32LE(HEADER.participant_capacity),
    control: Number(header.readBigUInt64LE(HEADER.control_offset)),
    participants: Number(header.readBigUInt64LE(HEADER.participants_offset)),
    slots: Number(header.readBigUInt64LE(HEADER.slots_offset)),
  };
}
