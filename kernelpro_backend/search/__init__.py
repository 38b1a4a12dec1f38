"""Search for faster kernels: MCTS over candidates (ask/tell), proposers (built-in expert rules
in rules.py; an LLM behind an OpenAI-compatible endpoint in llm/), rewards, budgets and search
memory.

Must not: parse profiler output (findings arrive typed), or compile/time candidates (the
measurer does)."""

from .budget import Budget, BudgetTracker
from .llm import LLMProposer, LLMSetupError
from .measure import Measurer
from .memory import MoveRecord, SearchMemory, default_memory_path
from .optimize import SearchOutcome, optimize
from .proposer import Proposal, ProposalRequest, Proposer, bottleneck_of
from .rewards import RewardModel, faster_beyond_spread
from .rules import RuleProposer
from .space import CodegenSpace, SearchSpace, codegen_space, move_name
from .tree import SearchTree, TreeParams
from .winner import Choice, Measured, choose_winner

__all__ = [
    "Budget",
    "BudgetTracker",
    "Choice",
    "CodegenSpace",
    "LLMProposer",
    "LLMSetupError",
    "Measured",
    "Measurer",
    "MoveRecord",
    "Proposal",
    "ProposalRequest",
    "Proposer",
    "RewardModel",
    "RuleProposer",
    "SearchMemory",
    "SearchOutcome",
    "SearchSpace",
    "SearchTree",
    "TreeParams",
    "bottleneck_of",
    "choose_winner",
    "codegen_space",
    "default_memory_path",
    "faster_beyond_spread",
    "move_name",
    "optimize",
]
