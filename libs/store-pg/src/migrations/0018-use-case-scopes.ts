import { type Kysely, type Migration, sql } from 'kysely';

/**
 * `0018_use_case_scopes` (issue 16 item 7, docs/api.md "Use cases"): a reservation may hold a
 * third admission scope, its tenant's use case (`usecase:<tenant>/<name>` rows in
 * `admission_scopes` and `budget_periods`, which need no schema change). The reservation records
 * which use case, so its settlement, release and reconciliation lock and update that scope's
 * rows too. Null for every reservation made before, and for requests without a defined use case.
 */
export const useCaseScopes: Migration = {
  async up(db: Kysely<unknown>): Promise<void> {
    await sql`ALTER TABLE reservations ADD COLUMN use_case text`.execute(db);
  },
  async down(db: Kysely<unknown>): Promise<void> {
    await sql`ALTER TABLE reservations DROP COLUMN use_case`.execute(db);
  },
};
