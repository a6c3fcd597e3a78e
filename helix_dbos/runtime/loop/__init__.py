"""The agent loop (`agent_loop.py`): one model step after another with its tools, replies
planned ahead, rows written per step, and the final write that ends a run.
"""
