"""The chaos toolkit: real OS processes, real faults, a history and checkers (SPEC §16).

Jepsen's shape: a scenario names roles (clients), a nemesis schedule (faults) and checkers
(invariants); a run records a history and ends with verdicts. ``python -m chaos run FILE``.
The toolkit drives ``hermes_state`` only through its public API, its events and its failpoints.
"""

__all__ = ["__version__"]
__version__ = "0.1.0"
