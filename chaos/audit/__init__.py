"""``python -m chaos audit``: planted bugs the scenarios must catch (issue 14; SPEC §16).

The package: :mod:`.command` (the command line; the rest is imported when it runs),
:mod:`.driver` plans and runs an audit (copies, controls, confirmation runs), :mod:`.verdicts`
says when a failing run is a kill, :mod:`.catalogue` loads the mutant catalogue
(``chaos/audit/mutants/``: YAML rewrites) and :mod:`.patches` unified diffs, :mod:`.plant` is
what both share, :mod:`.reach` names the mutated statements, :mod:`.probe` is the
``sitecustomize`` that proves every process of a run imported the mutated copy and records
whether it reached the mutated code, and :mod:`.report` prints the kill table. Design:
docs/decisions/0013-audit.md, docs/decisions/0026-audit-package.md.
"""

from __future__ import annotations

from .command import cmd_audit

__all__ = ["cmd_audit"]
