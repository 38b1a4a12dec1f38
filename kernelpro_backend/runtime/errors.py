"""The runtime's errors, in a module of their own so that the loaders (candidate.py, the cuda_*
modules) share them without importing each other.

Owns: `CandidateLoadError`.
"""


class CandidateLoadError(Exception):
    """The candidate could not be turned into a callable (syntax, import or build error)."""
