"""`HelixDBOS`, the one object a user builds: it wires the layers below it (runtime, memory,
schedules, built-in tools, the A2A transport) that must not import each other, and offers
their methods.
"""
