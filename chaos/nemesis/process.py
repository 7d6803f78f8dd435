"""Process faults (SPEC §16.2): real signals to role processes (``kill -9`` is a real SIGKILL)."""

from __future__ import annotations

import os
import signal
from typing import Callable

from .base import NemesisEnv, NemesisError, targets


def _signal(sig: int) -> Callable[[NemesisEnv, dict], dict]:
    def fault(env: NemesisEnv, params: dict) -> dict:
        sent = []
        for inst in targets(env, params):
            try:
                os.kill(inst.pid, sig)
                sent.append({"process": inst.process, "pid": inst.pid})
            except ProcessLookupError:
                pass
        if not sent:
            raise NemesisError(f"every instance of {params.get('role')!r} exited before the signal")
        return {"signal": signal.Signals(sig).name, "role": params.get("role"),
                "pids": [s["pid"] for s in sent], "processes": [s["process"] for s in sent]}
    return fault


SIGNAL_FAULTS = {
    "kill": _signal(signal.SIGKILL),
    "terminate": _signal(signal.SIGTERM),
    "stop": _signal(signal.SIGSTOP),
    "cont": _signal(signal.SIGCONT),
}
