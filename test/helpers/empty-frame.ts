// A frame that needs no memory: one struct column without fields, all its
// buffers absent. Tests of ring mechanics publish it and tell frames apart by
// their tags.
import { HANDLE_BYTES } from '../../lib/codec/layout.js';
import { absentBuffer, type FrameDescription } from '../../lib/index.js';

export const emptyFrame = (): FrameDescription => ({
  rowCount: 1,
  metadata: null,
  columns: [{ name: 's', format: '+s', nullable: true, dictionaryOrdered: false, mapKeysSorted: false, metadata: null, dictionary: -1, length: 1, nullCount: 0, offset: 0, buffers: [absentBuffer()], children: [] }],
  dictionaries: [],
  syncKind: 0,
  syncHandle: new Uint8Array(HANDLE_BYTES),
});
