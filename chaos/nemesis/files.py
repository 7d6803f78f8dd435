"""File faults (SPEC §16.2): real operations on the store's files (``rm``, ``mv``, ``cp``, zeroing)."""

from __future__ import annotations

import os
from pathlib import Path

from .base import NemesisEnv, NemesisError


def delete_sidecars(env: NemesisEnv, params: dict) -> dict:
    """``unlink`` the store's ``-wal`` and/or ``-shm`` (the user's ``rm state.db-wal``)."""
    deleted, missing = [], []
    for which in params.get("files", ["wal", "shm"]):
        path = Path(f"{env.db_path}-{which}")
        try:
            os.unlink(path)
            deleted.append(path.name)
        except FileNotFoundError:
            missing.append(path.name)
    if not deleted:
        raise NemesisError(f"nothing to delete: {', '.join(missing)} did not exist")
    return {"files": deleted, "missing": missing}


FILE_FAULTS = {
    "delete_sidecars": delete_sidecars,
}
