-- Limits per model and per tenant (issue 34).
-- `tenant`: who a run was started for (`execute(..., tenant=...)`), kept in its options
-- and derived here, so usage can be grouped by tenant in SQL without a write of its own.
-- `queued_for`: the model queue a live run waits on for a call slot (a model with
-- `LLMConfig(max_concurrent=..., rate_limit=...)`); NULL while it runs or has ended.
ALTER TABLE helix.runs
    ADD COLUMN IF NOT EXISTS tenant text GENERATED ALWAYS AS (options ->> 'tenant') STORED;
ALTER TABLE helix.runs ADD COLUMN IF NOT EXISTS queued_for text;
CREATE INDEX IF NOT EXISTS runs_tenant_idx ON helix.runs (tenant) WHERE tenant IS NOT NULL;
CREATE INDEX IF NOT EXISTS runs_queued_idx ON helix.runs (queued_for)
    WHERE queued_for IS NOT NULL;
