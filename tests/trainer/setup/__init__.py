"""Tests of ``swerl/trainer/setup/``: auto, the plan's sizing, the preflight."""
