"""Datasets: the synthetic spatial-relations generator, the VSR loader, and prompt conversion."""
