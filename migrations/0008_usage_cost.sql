-- The price of each LLM call in US dollars (issue 16), from the genai-prices table of the
-- helix version that wrote the row: input tokens (cached ones at the cache-read and
-- cache-write prices), output tokens (reasoning ones at a reasoning price where the
-- provider has one). NULL when the model is not in the table, for rows of other kinds
-- (a subagent row's tokens are priced in the child's own llm rows), and for rows written
-- before this migration.

ALTER TABLE helix.usage ADD COLUMN IF NOT EXISTS cost_usd numeric;

COMMENT ON COLUMN helix.usage.cost_usd IS
    'kind llm: the call''s price in USD from the genai-prices table (cache reads/writes and reasoning priced apart); NULL when the model is unknown to it, for other kinds, and for rows written before migration 0008';
