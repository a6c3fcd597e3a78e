"""A session's runs: opening a run in its session, the session's queue of messages (double
texting), steering a running run, reading sessions back, and the handle a caller waits on.
"""
