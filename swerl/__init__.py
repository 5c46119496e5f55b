"""swerl: reinforcement learning of coding agents in Docker sandboxes.

Data flows down the package: ``tasks`` -> ``sandbox`` -> ``agent`` + ``inference``
-> ``rl`` -> ``trainer`` -> ``selection`` / ``cli``. Imports point down that chain only.
"""

__version__ = "0.1.0"
