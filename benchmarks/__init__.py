"""Benchmarks, run by hand (not by pytest): ``python -m benchmarks`` runs them all (``make bench``)."""
