import type { Kysely, Migration } from 'kysely';

/**
 * `0007_idempotency_by_generation`: an index on `idempotency_keys (tenant_id, generation_id)`,
 * so `GET /v1/generations/{id}/events` finds a retained result by generation id on any gateway.
 */
export const idempotencyByGeneration: Migration = {
  async up(db: Kysely<unknown>): Promise<void> {
    await db.schema.createIndex('idempotency_keys_generation_idx').on('idempotency_keys').columns(['tenant_id', 'generation_id']).execute();
  },
  async down(db: Kysely<unknown>): Promise<void> {
    await db.schema.dropIndex('idempotency_keys_generation_idx').execute();
  },
};
