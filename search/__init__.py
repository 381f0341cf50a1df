"""The ``--cost model`` fusion search (docs/DESIGN.md §Fusion, §Cost model): the boundary search over the
saturated e-graph (``model.py``, registered as ``--cost=model`` where it is defined), its sites and moves
(``sites.py``), the global merge search (``merge.py``), the rules' legality (``legality.py``), repeated
blocks searched once and stitched (``segment.py``, ``stitch.py``), what it returns (``result.py``) and the
hand-style partition ``--explain`` prices beside it (``hand_partition.py``). It prices with pricing/.
"""
from .model import ModelCost, saturate_unfused
from .result import Candidate, Rejection, Search, Streamed

__all__ = ["ModelCost", "saturate_unfused", "Candidate", "Rejection", "Search", "Streamed"]
