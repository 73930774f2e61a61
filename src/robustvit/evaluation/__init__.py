"""Evaluation: suites (registry) and the resumable runner."""
