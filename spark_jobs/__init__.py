"""Batch plane: PySpark jobs (catch-up, consistency check) over the mirror's clusters."""
