"""A small Django shop that pushes a kiq job when a customer signs up (the walk-through in README.md)."""
