"""Benchmarks of sandboxes against baselines measured in the same run (`make bench`)."""
