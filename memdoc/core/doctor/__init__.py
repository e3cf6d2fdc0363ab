"""The doctor: OOM texts, symptoms and their prescriptions, findings on a measured run."""
