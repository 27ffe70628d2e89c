/**
 * V8 compiles a function the first time it runs. On the publish path that was
 * most of a new producer's first frame: 2.9 ms from publishFrame() to the
 * consumer holding the frame on the H100 host, 0.8 ms with `node --no-lazy`
 * (the encoder alone: 0.7 ms cold, 0.07 ms compiled eagerly, on a 2-core dev
 * machine). Producer.open() and Consumer.open() run their side of the codec
 * once on a sample frame, so that opening pays the compilation and the first
 * frame does not. The sample is encoded and decoded in memory only: it never
 * reaches a ring, a device or a consumer.
 */
import { absentBuffer, forEachBuffer, type FrameDescription } from './codec/description.js';
import { decodeValidatedFrame } from './codec/decode.js';
import { encodeFrame } from './codec/encode.js';
import { HANDLE_BYTES } from './codec/layout.js';
import { eventDevice } from './device-upload.js';
import { nextOptions, parseOptions, publishOptions } from './options.js';

/** One nullable column with a validity bitmap and a data buffer on device 0: the common case. */
function sampleFrame(): FrameDescription {
  const device = { kind: 'cuda-ipc', deviceOrdinal: 0, deviceUuid: new Uint8Array(16), allocationId: 1n, handle: new Uint8Array(HANDLE_BYTES) } as const;
  return {
    rowCount: 8,
    metadata: null,
    columns: [
      {
        name: 'sample',
        format: 'i',
        nullable: true,
        dictionaryOrdered: false,
        mapKeysSorted: false,
        metadata: null,
        dictionary: -1,
        length: 8,
        nullCount: 0,
        offset: 0,
        buffers: [absentBuffer(), { ...device, offset: 0, length: 32 }],
        children: [],
      },
    ],
    dictionaries: [],
    syncKind: 0,
    syncHandle: new Uint8Array(HANDLE_BYTES),
  };
}

/** Compiles what publishFrame() runs before its native call: options, the buffer walk, the encoder. */
export function warmUpPublishPath(): void {
  const sample = sampleFrame();
  parseOptions(publishOptions, undefined, 'publish() options');
  forEachBuffer(sample, () => undefined);
  eventDevice(sample, undefined);
  encodeFrame(sample);
}

/** Compiles next()'s options and the decoder of a frame's description (the sample is valid by construction). */
export function warmUpReceivePath(): void {
  parseOptions(nextOptions, undefined, 'next() options');
  decodeValidatedFrame(encodeFrame(sampleFrame()));
}
