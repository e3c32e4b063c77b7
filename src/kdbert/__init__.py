"""kdbert: knowledge distillation for BERT-family models."""

__version__ = "0.1.0"
