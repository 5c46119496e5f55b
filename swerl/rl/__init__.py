"""swerl.rl stage."""
