-- 0013_org_wallet: the wallet fields GET /v2/user/me reports (issue 10 item 3, SPEC R5; the
-- source document's example shows them). The dispatcher keeps them for the organisation's
-- bookkeeping and never changes or enforces them: billing is outside this product. An operator
-- sets them with SQL; a new organisation starts at 0 in USD.
-- Applied by `dispatcher migrate` inside one transaction: no BEGIN/COMMIT in migration files.
ALTER TABLE organisations
    ADD COLUMN wallet_currency           text NOT NULL DEFAULT 'USD'
                                         CHECK (wallet_currency ~ '^[A-Z]{3}$'),
    ADD COLUMN wallet_balance            numeric(16, 2) NOT NULL DEFAULT 0,
    ADD COLUMN wallet_allocated_total    numeric(16, 2) NOT NULL DEFAULT 0,
    ADD COLUMN wallet_lifetime_allocated numeric(16, 2) NOT NULL DEFAULT 0,
    ADD COLUMN wallet_total_spent        numeric(16, 2) NOT NULL DEFAULT 0;
