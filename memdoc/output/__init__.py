"""What memdoc writes to the user's disk: emitted trainer configs, all files at once or none."""
