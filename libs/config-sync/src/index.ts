/** Signed configuration snapshots: see README of the lib (filled in by its implementation). */
export {};
