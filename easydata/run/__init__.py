"""A run's life cycle: planning, checkpoints and resume, the output lock, staging and commit, the manifest, progress."""
