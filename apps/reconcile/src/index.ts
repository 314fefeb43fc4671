// The reconcile command is apps/reconcile/src/main.ts; its logic lives in @weir/reconcile.
export {};
