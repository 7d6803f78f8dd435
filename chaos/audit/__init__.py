"""``python -m chaos audit``: planted bugs the scenarios must catch (issue 14; SPEC §16).

The package: :mod:`.driver` plans and runs an audit (copies, controls, reruns, the verdicts),
:mod:`.catalogue` loads the mutant catalogue (``chaos/audit/mutants/*.yaml``), :mod:`.probe` is
the ``sitecustomize`` that proves every process of a run imported the mutated copy, and
:mod:`.report` prints the kill table. Design: docs/decisions/0013-audit.md.
"""

from __future__ import annotations

from .driver import (ERROR, KILLED, SURVIVED, Audit, AuditInvalid, MutantResult, RunOutcome,
                     Workspace, cmd_audit, run_audit)

__all__ = ["ERROR", "KILLED", "SURVIVED", "Audit", "AuditInvalid", "MutantResult", "RunOutcome",
           "Workspace", "cmd_audit", "run_audit"]
