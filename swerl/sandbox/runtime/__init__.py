"""Runtime side of the sandbox stage: one started sandbox and what runs inside it (commands
through the keeper or ``docker exec``, files as tar streams, persistent shells and tmux, the
verifier protocol and its clean room)."""
