"""The schema-migration matrix (SPEC §16.6): every historical version, and every real store users
have, opened by the current code in three modes (plain, beside an old-schema writer, killed at
every migration step).

- :mod:`chaos.matrix.driver`: the cells of generated fixtures, the run and the command line
  (``python -m chaos.matrix``; also ``python -m chaos matrix``);
- :mod:`chaos.matrix.real` and :mod:`chaos.matrix.real_stores`: the same modes over real stores
  written by upstream releases (and ``--stores DIR``), checked against their dumps;
- :mod:`chaos.matrix.open_probe`: a second open of a migrated store, here or in a child process;
- :mod:`chaos.matrix.legacy_writer`: the old-schema writer process (``python -m
  chaos.matrix.legacy_writer``).
"""

_LAZY = frozenset({
    "Cell", "Fixtures", "MatrixRow", "api_problems", "cells", "main", "real_stores_of",
    "run_cell", "run_matrix", "second_open_problems",
})


def __getattr__(name: str):
    """The driver's names, imported when first used (PEP 562): declaring the matrix's flags
    (:mod:`chaos.matrix.arguments`) never loads the driver."""
    if name in _LAZY:
        from . import driver

        return getattr(driver, name)
    if name in ("MODES", "OLD_VERSIONS", "QUICK_CRASH_VERSIONS", "QUICK_WRITER_VERSIONS",
                "add_arguments", "build_parser"):
        from . import arguments

        return getattr(arguments, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "MODES", "OLD_VERSIONS", "QUICK_CRASH_VERSIONS", "QUICK_WRITER_VERSIONS", "Cell", "Fixtures",
    "MatrixRow", "add_arguments", "api_problems", "build_parser", "cells", "main",
    "real_stores_of", "run_cell", "run_matrix", "second_open_problems",
]
