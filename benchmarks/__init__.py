"""Benchmarks of SPEC §17: every figure measured side by side with its reference in one run.

``python -m benchmarks`` runs all rows (see :mod:`benchmarks.__main__`); the ``bench_*`` modules
can also be run alone. Kept out of the test suite (speed belongs here, not in tests).
"""
