"""Batched evaluation and scoring of generated responses."""
