"""Reading the user's own training configuration files (Axolotl, LLaMA-Factory, TRL/HF TrainingArguments,
DeepSpeed, accelerate) into plan values: pure mappings from parsed documents, no file I/O
(`memdoc.resolve.user_config` loads the files)."""
