"""What runs on a generator host, on the standard library alone.

`runner` and `rules` are shipped there, with `core.errors`, as one blob; `demo_generator`
is the stand-in generator that a fresh repository's `local` host runs.
"""
