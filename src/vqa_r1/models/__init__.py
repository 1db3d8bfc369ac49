"""Model registry, family adapters, tiny offline builds and batched generation."""
