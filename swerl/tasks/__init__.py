"""swerl.tasks stage."""
