"""Ground truth for issue 28: real DeepSpeed and FSDP2 runs on the CPU (gloo, world size 2), per-rank bytes."""
