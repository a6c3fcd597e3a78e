"""Runs started by a run: local sub-agents, companions and remote sub-agents (helix servers
over HTTP; other transports, such as A2A, handed in from above).
"""
