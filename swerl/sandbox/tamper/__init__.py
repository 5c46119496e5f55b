"""The tamper signal of the sandbox stage: which attempts touched what the verifier depends on
(its output files, its inputs, its interpreter and tools, its import path, its config discovery,
its processes), judged from outside the agent's container and from the text the agent produced.
A reason is evidence recorded on the trial; what training does with it is the agent stage's
choice (``AgentConfig.on_tamper``)."""
