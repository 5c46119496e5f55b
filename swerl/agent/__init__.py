"""swerl.agent stage."""
