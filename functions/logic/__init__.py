"""Use cases: each takes the ``Services`` ports, a time and domain values, and returns domain values."""
