"""The evaluator: the per-candidate pipeline (workers), runtime defences, and the parent-side runner."""
