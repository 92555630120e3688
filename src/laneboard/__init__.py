"""laneboard: a durable board, a deterministic supervisor and agent lanes."""

__version__ = "0.1.0"
