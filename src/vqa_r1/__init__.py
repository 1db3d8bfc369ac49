"""VQA-R1: train vision-language models to reason before answering visual questions."""

__version__ = "0.2.0"
