-- The final write plans once per connection (issue 48). `helix.end_step_and_run` runs
-- one large statement; PL/pgSQL plans it again at each call with that call's values
-- ("custom" plans) for as long as the planner's estimate of such a plan stays below its
-- estimate of a plan for any values ("generic"), which for this statement it always
-- did on a short session: each run's end paid ~0.45 ms of planning (1.15 ms a call
-- against 0.70 with the generic plan, 10 messages), and 1.2 ms more at 1,000 messages
-- (the planner reads the ends of the messages index for each custom plan). Every
-- lookup in the statement is by a key (run, session, usage, chunk key), so the generic
-- plan is the custom plan without the planning; a pooled connection plans it once.
ALTER FUNCTION helix.end_step_and_run(
    text, text, text, int, text, int, int, text, text, text, int, int,
    text, text, text, text, boolean, text, text, text, boolean)
    SET plan_cache_mode = force_generic_plan;
