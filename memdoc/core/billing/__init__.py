"""The bill: activations, model states, the per-phase bill, inference, step time (remedies: `core.remedies`)."""
