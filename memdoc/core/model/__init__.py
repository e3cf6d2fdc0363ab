"""The model and the plan: architecture numbers, exact parameter counts, the training plan, GPUs."""
