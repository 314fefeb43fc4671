/**
 * Maps a string to a uniform number in [0, 1): FNV-1a (32-bit) followed by MurmurHash3's
 * `fmix32` finalizer for avalanche, so ids that differ in one character spread evenly.
 * Sources: FNV (Fowler–Noll–Vo, IETF draft-eastlake-fnv), MurmurHash3 (Austin Appleby).
 */
export function stickyUnit(key: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < key.length; i++) {
    h ^= key.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  h ^= h >>> 16;
  return (h >>> 0) / 0x1_0000_0000;
}
