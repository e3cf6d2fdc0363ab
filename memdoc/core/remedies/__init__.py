"""Remedies: what makes a plan fit, from one ladder.

`rungs` (the ordered remedies, each with its lever), `levers` (the lever vocabulary and ranks the
symptom knowledge base uses, derived from the rungs), `climb` (the ladder applied to a plan),
`maximum` (the largest batch or sequence that fits), `search` (the fastest plans that fit),
`dataset_fit` (a dataset's lengths against a plan) and `inference` (the inference ladder and vLLM's
budget).
"""
