-- One meaning for the LLM usage columns, whatever the provider (issue 14).
--
-- input_tokens counts every input token the model read, cached or not: OpenAI's
-- prompt_tokens, Anthropic's input_tokens + cache_read_input_tokens +
-- cache_creation_input_tokens. cache_read_tokens and cache_write_tokens are parts of it.
-- A failed call has success = false and the model the provider named (NULL if none).

COMMENT ON COLUMN helix.usage.input_tokens IS
    'kind llm: every input token of the call, cached or not (cache_read_tokens and cache_write_tokens are included in it); the same for every provider';
COMMENT ON COLUMN helix.usage.cache_read_tokens IS
    'kind llm: the part of input_tokens read from the provider''s prompt cache';
COMMENT ON COLUMN helix.usage.cache_write_tokens IS
    'kind llm: the part of input_tokens written to the provider''s prompt cache';
COMMENT ON COLUMN helix.usage.reasoning_tokens IS
    'kind llm: the part of output_tokens spent on reasoning or thinking';
COMMENT ON COLUMN helix.usage.model IS
    'kind llm: the model the provider said answered (e.g. gpt-4o-2024-08-06); NULL when it named none, as for most failed calls';
COMMENT ON COLUMN helix.usage.success IS
    'false for a failed LLM call (one row for the call, after its retries) or a failed tool call';

-- Rows written before this migration by the Anthropic adapter counted only the tokens
-- after the cache in input_tokens: add the cached ones back.
UPDATE helix.usage
SET input_tokens = input_tokens + cache_read_tokens + cache_write_tokens
WHERE kind = 'llm' AND model LIKE 'claude-%'
  AND (cache_read_tokens > 0 OR cache_write_tokens > 0);

-- Failed calls were recorded as successes under the configured name ('openai:gpt-4o'),
-- a name no provider reports (the built-in adapters always report a model on success).
UPDATE helix.usage
SET success = false, model = NULL
WHERE kind = 'llm' AND model ~ '^(anthropic|openai):'
  AND input_tokens = 0 AND output_tokens = 0;
