"""Input resolution, no torch: model ids and configs (catalog, local HF cache, Hub), recipes, the local GPU."""
