"""memdoc inside the user's own training process (imports torch and transformers).

`memdoc.integrations.hf.MemdocCallback`: a transformers `TrainerCallback` (HF Trainer, TRL).
"""
