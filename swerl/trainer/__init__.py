"""swerl.trainer stage."""
