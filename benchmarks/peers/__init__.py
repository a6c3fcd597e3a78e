"""The peer benchmark: helix_dbos and other durable agent stacks on one workload
(see README.md here; run it with `python -m benchmarks.peers`)."""
