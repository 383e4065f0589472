"""Baseline search methods on the same specs, cost model and budgets: brute force and DP-style search."""
