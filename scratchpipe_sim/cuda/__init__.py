"""cuda layer."""
