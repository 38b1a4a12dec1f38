"""Checking a bench mode's results: the tolerances and comparison (compare.py) and the
references they are checked against (reference.py)."""
