-- Long-term memory (issue 36): memories scoped to a resource (a user, say), full-text
-- searchable the moment they are saved, vector-searchable once embedded.
--
-- Vector search is an ability the server may lack: the `embedding` column and its HNSW
-- indexes exist only where pgvector is installed. This file never fails without it; it
-- defines `helix.memory_enable_vector()`, which adds the column when the extension can be
-- created, and calls it once. helix calls it again at start (under an advisory lock), so a
-- server that gains pgvector later gains vector search without a new migration.

-- The resource (a user, a tenant) a session's memories belong to. Bound before the run
-- opens (`execute(..., resource_id=...)`), so the run's first step already sees it; a
-- sub-agent's session uses its root's.
CREATE TABLE IF NOT EXISTS helix.session_resources (
    session_id  text PRIMARY KEY,
    resource_id text NOT NULL,
    bound_at    timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS session_resources_resource ON helix.session_resources (resource_id);

CREATE TABLE IF NOT EXISTS helix.memories (
    memory_id           text PRIMARY KEY,
    resource_id         text NOT NULL,
    session_id          text,
    text                text NOT NULL,
    metadata            jsonb NOT NULL DEFAULT '{}'::jsonb,
    embedding_status    text NOT NULL DEFAULT 'pending'
                        CHECK (embedding_status IN ('pending', 'complete', 'failed')),
    embedding_model     text,
    embedding_dimension integer,
    embedding_error     text,
    created_at          timestamptz NOT NULL DEFAULT now(),
    updated_at          timestamptz NOT NULL DEFAULT now(),
    embedded_at         timestamptz,
    expires_at          timestamptz,
    search              tsvector GENERATED ALWAYS AS (to_tsvector('english', text)) STORED
);
CREATE INDEX IF NOT EXISTS memories_search ON helix.memories USING gin (search);
CREATE INDEX IF NOT EXISTS memories_resource ON helix.memories (resource_id, created_at DESC);
CREATE INDEX IF NOT EXISTS memories_unembedded ON helix.memories (created_at)
    WHERE embedding_status <> 'complete';
CREATE INDEX IF NOT EXISTS memories_expiry ON helix.memories (expires_at)
    WHERE expires_at IS NOT NULL;

-- The memories injected into one LLM step's system prompt: written once, read on every
-- later attempt of that step, so a replay injects the same memories with the same text.
CREATE TABLE IF NOT EXISTS helix.memory_recalls (
    run_id      text NOT NULL,
    step        integer NOT NULL,
    memories    jsonb NOT NULL,
    recorded_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (run_id, step)
);

-- Whether vector search is available: the extension is (or could be made) present and
-- the column exists. Never raises for a missing or forbidden extension.
CREATE OR REPLACE FUNCTION helix.memory_enable_vector() RETURNS boolean
LANGUAGE plpgsql AS $fn$
DECLARE
    vector_schema text;
BEGIN
    SELECT n.nspname INTO vector_schema FROM pg_extension e
        JOIN pg_namespace n ON n.oid = e.extnamespace WHERE e.extname = 'vector';
    IF vector_schema IS NULL
       AND EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = 'vector') THEN
        BEGIN
            CREATE EXTENSION IF NOT EXISTS vector;
        EXCEPTION WHEN OTHERS THEN
            RAISE NOTICE 'helix memory: CREATE EXTENSION vector failed (%); vector search is off', SQLERRM;
        END;
        SELECT n.nspname INTO vector_schema FROM pg_extension e
            JOIN pg_namespace n ON n.oid = e.extnamespace WHERE e.extname = 'vector';
    END IF;
    IF vector_schema IS NULL THEN
        RETURN false;
    END IF;
    EXECUTE format('ALTER TABLE helix.memories ADD COLUMN IF NOT EXISTS embedding %I.vector',
                   vector_schema);
    RETURN true;
END
$fn$;

SELECT helix.memory_enable_vector();
