"""Use cases that join the pieces: tracking, submitting and executing actions."""
