"""What a user declares, with no I/O: agents, tools and their context, hooks, queues, sub-
agents, companions, remote sub-agents and schedules. Everything above reads these; they
import only `errors`, `log_events` and `orchestration`.
"""
