// Moved to @weir/engine-server (shared with apps/engine-sim).
export { createSlotGate, type SlotGate } from '@weir/engine-server';
