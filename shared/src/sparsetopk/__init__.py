"""sparsetopk: exact, deterministic top-k for sparse-attention indexers.

    import sparsetopk
    idx, _ = sparsetopk.topk(scores, 16, lengths=seq_lens)

One contract (the project README / SPEC), many backends; the registry picks
the fastest installed one that serves the call.
"""

from . import ops as _ops  # noqa: F401  (registers sparsetopk::topk / ::merge)
from . import registry
from .api import TopK, merge, topk
from .protocol import Availability, Backend, Capabilities, MergeCall, TopKCall

__version__ = "0.1.0"

__all__ = [
    "TopK",
    "topk",
    "merge",
    "registry",
    "Backend",
    "Capabilities",
    "Availability",
    "TopKCall",
    "MergeCall",
    "__version__",
]
