"""Context-parallel micro-batches measured on real processes (placeholder, filled below)."""
