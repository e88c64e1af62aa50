"""Launchers that need CUDA; import lazily."""
