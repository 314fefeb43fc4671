import { type Kysely, type Migration, sql } from 'kysely';

/**
 * `0011_lease_demand`: a budget row remembers that a holder wants money its other holders sit on
 * (ADR 0002 §1, rebalancing). A shared holder whose synchronous draw found too little unleased
 * for a waiting request sets `demand_until_ms` (epoch ms) and `demand_holder`; every other
 * holder of the row learns it at its next heartbeat and gives back what it does not need, so a
 * tenant's money held by a quiet holder reaches a busy one within a heartbeat instead of after
 * the quiet one's idle return (a minute). A draw of the wanting holder that is granted what it
 * needed clears the demand. 0: no demand.
 */
export const leaseDemand: Migration = {
  async up(db: Kysely<unknown>): Promise<void> {
    await sql`ALTER TABLE budget_periods ADD COLUMN demand_until_ms bigint NOT NULL DEFAULT 0, ADD COLUMN demand_holder text`.execute(db);
  },
  async down(db: Kysely<unknown>): Promise<void> {
    await sql`ALTER TABLE budget_periods DROP COLUMN demand_until_ms, DROP COLUMN demand_holder`.execute(db);
  },
};
