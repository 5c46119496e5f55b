"""swerl.inference stage."""
