"""Ground truth for issue 23: real TRL DPO and GRPO optimizer steps on the CPU, peak live tensor bytes per phase."""
