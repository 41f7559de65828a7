"""The wiring: the command line, the twistd plugin's service, logs and the PID-1 reaper.

The only package that knows the reactor and may import every other.
"""
