import type { SettlementApplier, SettlementApplyResult, SettlementBatch, SettlementItem } from '@weir/core';

/**
 * True for a database error caused by the data of a statement rather than by the database
 * (SQLSTATE class 22 data exception, 23 integrity constraint violation, 54 program limit
 * exceeded): applying the same data again fails the same way, while an outage (connection
 * errors, class 08, 57, 53…) passes.
 */
export function isDataError(error: unknown): boolean {
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === 'string' && /^(22|23|54)[0-9A-Z]{3}$/.test(code);
}

/** A settlement the ledger could not apply at all, even degraded. */
export interface RejectedSettlement {
  item: SettlementItem;
  error: unknown;
}

/**
 * Applies a batch so that one bad settlement can never wedge the ledger behind it. The batch is
 * applied whole; when that fails with a data error ({@link isDataError}) its items are applied
 * one at a time, in order. An item that still fails is applied degraded — its idempotency result
 * replaced by `interrupted` ("the result could not be stored") and its attempts dropped — so its
 * usage row and charge still land; an item that fails even so is handed to `onRejected` (to be
 * kept aside and alerted on) and skipped. The batch's position is recorded last. Any other error
 * is thrown (the caller retries the batch later; what was applied meanwhile is idempotent).
 */
export async function applyIsolating(
  applier: SettlementApplier,
  batch: SettlementBatch,
  onRejected: (rejected: RejectedSettlement) => void,
): Promise<SettlementApplyResult> {
  try {
    return await applier.apply(batch);
  } catch (error) {
    if (!isDataError(error) || batch.items.length === 0) throw error;
  }
  const total: SettlementApplyResult = { inserted: 0, duplicates: 0, idempotencyWritten: 0, overspends: [] };
  const add = (r: SettlementApplyResult) => {
    total.inserted += r.inserted;
    total.duplicates += r.duplicates;
    total.idempotencyWritten += r.idempotencyWritten;
    total.overspends.push(...r.overspends);
  };
  for (const item of batch.items) {
    try {
      add(await applier.apply({ journal: batch.journal, items: [item] }));
      continue;
    } catch (error) {
      if (!isDataError(error)) throw error;
      const degraded = degrade(item);
      if (degraded) {
        try {
          add(await applier.apply({ journal: batch.journal, items: [degraded] }));
          continue;
        } catch (again) {
          if (!isDataError(again)) throw again;
        }
      }
      onRejected({ item, error });
    }
  }
  if (batch.position) add(await applier.apply({ journal: batch.journal, items: [], position: batch.position }));
  return total;
}

/** The settlement without what most likely made it fail: its retained result (output text) and its attempts. */
function degrade(item: SettlementItem): SettlementItem | undefined {
  if (item.kind !== 'settle') return undefined;
  const { attempts: _attempts, ...usage } = item.entry.usage;
  const idem = item.entry.idempotency;
  return {
    kind: 'settle',
    entry: {
      usage,
      ...(idem
        ? {
            idempotency: {
              ...idem,
              outcome: { kind: 'interrupted', generationId: usage.generationId, message: `generation ${usage.generationId} finished but its result could not be stored; it was billed` },
            },
          }
        : {}),
    },
  };
}
