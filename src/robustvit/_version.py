"""The version of robustvit (read by packaging, result headers and checkpoints)."""

__version__ = "0.1.0"
