"""mushroom: find the hallucinated spans in LLM answers (SemEval-2025 Task 3, Mu-SHROOM).

Importing the package is cheap on purpose: heavy libraries (torch, vllm, transformers)
are imported only inside the backends that need them.
"""

__version__ = "0.1.0"
