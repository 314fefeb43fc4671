/** The control plane's store, admin API and snapshot composition. */
export {};
