"""Post-training's bill (`plan.task` other than sft): rows per task, the reference model, generation, the phases.

Pure arithmetic, no torch; the mechanisms and their order are read from TRL 1.16 (cited per function).
"""
