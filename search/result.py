"""What the ``--cost model`` boundary search returns (docs/DESIGN.md §Fusion): the candidates it priced,
the one it chose with its baseline and the fusions it rejected, and the stream decisions it took. The
search (search/model.py) makes them; the segment stitching (search/stitch.py) joins them; ``--explain``
and the benches read them.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import Callable

from ..egraph.api import Extraction


@dataclass
class Candidate:
    fused: frozenset  # site classes decided "fuse"
    extraction: "Extraction | None"
    priced: list = field(default_factory=list)
    illegal: list = field(default_factory=list)
    total: float = math.inf  # modelled µs (inf: infeasible or illegal, or not priced: see ``above``)
    above: float = -math.inf  # a price its total is known to be above (its pricing stopped there; still unpriced)


@dataclass
class Search:
    """The boundary search's result: the chosen candidate, the baseline (every site cut) and the
    fusions tried and rejected (for --explain and the benches: ``baseline`` and ``rejected`` are priced
    on first access; the search itself does not need them)."""
    best: Candidate
    baselines: Callable  # () -> Candidate, every site cut
    rejections: Callable  # () -> list of Rejection
    evaluations: int  # partitions priced whole
    sites: dict = field(default_factory=dict)  # Mat class -> (cut e-nodes, fused e-nodes)
    streamed: list = field(default_factory=list)  # Streamed: the stream decisions taken, with both prices
    stop: str = "exhausted"  # why the merge search ended (search/merge.py)
    nodes: int = 0  # subproblems of the merge search
    groups_priced: int = 0  # candidate kernels the merge search priced

    @functools.cached_property
    def baseline(self) -> Candidate:
        return self.baselines()

    @functools.cached_property
    def rejected(self) -> list:
        return self.rejections()



@dataclass(frozen=True)
class Rejection:
    """A fusion the search did not take: fusing away the materialization of the value of class
    ``mat`` (every read of it), with the prices of both partitions (``local``: the two kernels
    involved only, from the merge phase)."""
    mat: int
    why: str
    separate_us: float
    fused_us: "float | None"
    kernels_before: int
    kernels_after: int
    local: bool = False


@dataclass(frozen=True)
class Streamed:
    """A stream decision the search took: the value of class ``value`` as one pass over the keys
    (SoftmaxSum), in a partition of ``kernels`` kernels modelled at ``total_us``."""
    value: int
    total_us: float
    kernels: int
    passes: int  # walks over the keys: 1 online, 2 max and sum first

