// The data directory's lock lives in @weir/store-pg, beside the embedded database it protects,
// so `npm run reconcile` takes the very same lock while the all-in-one is stopped.
export { lockDataDir, type DataDirLock } from '@weir/store-pg';
