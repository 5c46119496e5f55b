"""swerl.sandbox stage."""
