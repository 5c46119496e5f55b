"""Tests of ``swerl/trainer/persistence/``: checkpoints, exports, the step commit and its kills."""
