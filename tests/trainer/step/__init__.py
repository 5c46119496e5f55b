"""Tests of ``swerl/trainer/step/``: training rows, the update, the KL reference, the guards."""
