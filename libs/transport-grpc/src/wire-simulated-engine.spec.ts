import { create, fromBinary, toBinary } from '@bufbuild/protobuf';
import type { RevisionSpec } from '@weir/core';
import { commonV1 } from '@weir/proto';
import { revisionFromWire, revisionToWire } from './wire-common';

describe('wire translation of a simulated engine', () => {
  it('round-trips every field of the profile through the binary format', () => {
    const revision: RevisionSpec = {
      id: 'sim@1',
      model: 'sim',
      engine: {
        kind: 'simulated',
        prefillTokensPerSecond: 10_000,
        decodeStepMs: [
          [1, 20],
          [8, 22.5],
          [32, 40],
        ],
        kvTokens: 65_536,
        maxSequences: 32,
        seed: 7,
      },
      contextWindow: 8192,
      maxOutputTokens: 1024,
      defaultOutputTokens: 256,
      pricing: { inputPerMTok: 0, outputPerMTok: 0, cachedInputPerMTok: 0 },
      replicas: [{ id: 'sim@1/0', baseUrl: 'http://127.0.0.1:9000/v1', slots: 32 }],
    };
    const bytes = toBinary(commonV1.RevisionSchema, create(commonV1.RevisionSchema, revisionToWire(revision)));
    expect(revisionFromWire(fromBinary(commonV1.RevisionSchema, bytes))).toEqual(revision);
  });
});
