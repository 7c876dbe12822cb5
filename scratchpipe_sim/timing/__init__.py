"""timing layer."""
