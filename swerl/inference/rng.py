"""Capture and restore the process-wide RNG states (Python, NumPy, torch CPU and CUDA).

Used where exact reproducibility depends on them: around vLLM engine construction (its worker
reseeds every generator at start) and in trainer checkpoints (bit-for-bit resume).
"""

from __future__ import annotations

import random
from typing import Any


def save_rng_state() -> dict[str, Any]:
    """Python, NumPy and torch (CPU + every CUDA device, when CUDA is initialized) RNG states."""
    import numpy as np
    import torch

    state: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng_state(state: dict[str, Any]) -> None:
    """Restore what :func:`save_rng_state` captured (CUDA states only where CUDA is present)."""
    import numpy as np
    import torch

    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
