"""Data plane: the mirror worker (`python -m mirror_worker`)."""
