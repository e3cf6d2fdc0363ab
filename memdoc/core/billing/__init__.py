"""The bill and its ladder: activations, model states, the per-phase bill, inference, step time, remedies."""
