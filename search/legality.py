"""The search's reading of the fusion legality the rules decide (docs/DESIGN.md §Fusion). The rules of
rules/fusion.egg put ``fuse-conflict`` facts in the e-graph (exported by egraph/graph.py): fusing every
Mat site of a conflict together computes its reduction where no loop order of the kernel owns it
(many-to-many). ``violations`` applies them to a decision set: a conflict counts when its sites are all
fused and, given an extraction, when the extraction holds its path. The facts range over every e-node of
a class (a spelling the extraction leaves out included), so ``on_path`` checks that the chosen terms
reach the conflict's reduction from its root across exactly its sites; which reads are legal is the
rules' alone.
"""
from __future__ import annotations

ELEMENTWISE = frozenset({"Unary", "Binary", "Cast", "Where", "Select"})
MOVEMENT = frozenset({"BroadcastInDim", "Transpose", "Permute", "Reshape", "Expand", "Pad"})


def violations(view, fused, chosen=None) -> list:
    """(rule, sites, reduction class, why) for each conflict of the rules (rules/fusion.egg many-to-many)
    whose sites the decision set ``fused`` (Mat site classes) fuses together and, with ``chosen`` (class
    -> e-node, the classes an extraction reaches from its roots), whose path that extraction holds;
    [] when the partition is legal. The reason names the reduction by its class, ``@N`` (``--explain``
    says the user's op name there)."""
    fused = frozenset(fused)
    paths = None if chosen is None else _paths(view, chosen)
    return [("many-to-many", sorted(k.sites), k.reduce, f"fused into {'a kernel' if k.root is None else f'the reduction @{k.root}'}, "
             f"the reduction @{k.reduce} would be read by broadcast inside one kernel (many-to-many): never legal "
             "(rule many-to-many, rules/fusion.egg)")
            for k in _within(view, fused) if k.sites <= fused and (paths is None or paths.holds(k, fused))]


def violates(view, fused, chosen: dict, first=()) -> bool:
    """``bool(violations(view, fused, chosen))``, stopping at the first conflict that holds, looking first at the
    conflicts of the sites ``first`` (a descent's move: the site it fuses decides most of its conflicts)."""
    fused = frozenset(fused)
    paths = _paths(view, chosen)
    by_site = _conflicts_of_site(view)
    early = [k for s in first for k in by_site.get(s, ())]
    return any(k.sites <= fused and paths.holds(k, fused) for k in (*early, *_within(view, fused)))


def _conflicts_of_site(view) -> dict:
    """site -> the conflicts that hold it, in the view's order; kept on the view."""
    idx = view.__dict__.get("_conflicts_of_site")
    if idx is None:
        idx = view.__dict__["_conflicts_of_site"] = {}
        for k in view.conflicts:
            for s in k.sites:
                idx.setdefault(s, []).append(k)
    return idx


def _within(view, fused: frozenset) -> tuple:
    """The conflicts that may lie within ``fused``, in the view's order: each is indexed under its least site, so
    a small decision set (a group of the merge search) looks at its own sites' conflicts, not every one."""
    idx = view.__dict__.get("_conflicts_by_site")
    if idx is None:
        idx = view.__dict__["_conflicts_by_site"] = {}
        for j, k in enumerate(view.conflicts):
            idx.setdefault(min(k.sites), []).append((j, k))
    if len(fused) * 4 >= len(view.conflicts):
        return view.conflicts
    return tuple(k for _, k in sorted(jk for s in fused for jk in idx.get(s, ())))


def on_path(view, k, chosen: dict, fused: frozenset) -> bool:
    """Whether the chosen terms reach the reduction of conflict k from its root (the chosen Reduce's body;
    for a value's root, the root of a kernel of the partition: a chosen value whose site is cut, or a
    program root) crossing exactly k's sites, the way rules/fusion.egg's eval rules
    walk: through elementwise and movement nodes, across a read of a site (Read(Mat z) or View(z); a
    site whose value is a View of an unmaterialized value, the sibling concatenation, into that value),
    never into another Reduce's body. A value whose class holds its own identity read back (Read(Mat(x)) landed
    in x's class) is materialized by the partition unless its site is fused: the rules see no boundary
    there, the walk stops at it when that site is cut."""
    return _paths(view, chosen).holds(k, frozenset(fused))


PATHS_KEPT = 8  # extractions whose path index a view keeps (the merge search asks one extraction many times)


def _paths(view, chosen: dict) -> "_Paths":
    """The path index of one extraction, kept on the view for the last PATHS_KEPT extractions asked."""
    kept = view.__dict__.setdefault("_paths", {})
    p = kept.get(id(chosen))
    if p is None or p.chosen is not chosen:
        p = kept[id(chosen)] = _Paths(view, chosen)
        while len(kept) > PATHS_KEPT:
            del kept[next(iter(kept))]
    return p


class _Paths:
    """``on_path`` for one extraction, fast when asked many times (the merge search asks it for every
    group it prices). Built once: each chosen class's readers, with the site a read crosses. Per conflict,
    once: the classes the walk can reach its reduction from (a walk backwards from its ends across reads
    of its sites only), the walk's starts among them, and the sites whose cut the walk asks about there.
    The walk itself runs only inside those classes, and its answer is kept per the decision set's part
    over those sites: the same walk on the same answers gives the same result."""

    def __init__(self, view, chosen: dict):
        self.view, self.chosen = view, chosen
        self.mat, self.own, self.site_of = _mats(view), _own_reads(view), _sites_of(view)
        self.inner = {c for n in chosen.values() for c in n.children}
        readers: dict = {}  # class -> [(reader class, the site its read crosses or None)]
        ends = []  # chosen SoftmaxSum classes and materialized views (a walk's other ends)
        for x, n in chosen.items():
            if n.op in ELEMENTWISE or n.op in MOVEMENT:
                for c in n.children:
                    readers.setdefault(c, []).append((x, None))
            elif n.op == "Read" and n.children and n.children[0] in self.mat and self.mat[n.children[0]] != x:
                readers.setdefault(self.mat[n.children[0]], []).append((x, n.children[0]))
            elif n.op == "View" and n.children and n.children[0] != x and n.children[0] in self.site_of:
                readers.setdefault(n.children[0], []).append((x, self.site_of[n.children[0]]))
            if n.op == "SoftmaxSum" or (n.op == "View" and n.children and n.children[0] not in self.site_of):
                ends.append(x)
        self.readers, self.ends = readers, ends
        self.per: dict = {}  # conflict -> (classes, starts, asked sites, answers)
        self.streams: "dict | None" = None  # Reduce class -> the chosen SoftmaxSums computing it (``_Paths._streams_over``)

    def _region(self, k):
        if k in self.per:
            return self.per[k]
        view, chosen = self.view, self.chosen
        tips = [k.reduce] if k.reduce in chosen else []
        for x in self.ends:
            n = chosen[x]
            if (k.reduce in _streamed(view, x)) if n.op == "SoftmaxSum" else (k.reduce in _pieces(view, n.children[0])):
                tips.append(x)
        up, stack = set(), tips
        while stack:
            c = stack.pop()
            if c in up:
                continue
            up.add(c)
            stack.extend(x for x, s in self.readers.get(c, ()) if s is None or s in k.sites)
        if k.root is not None:
            if k.root in chosen and chosen[k.root].op == "Reduce":
                starts = [chosen[k.root].children[0]]
            else:  # a streamed softmax-weighted sum computes the reduction k.root: it reads its values as it did
                starts = [n.children[1] for n in self._streams_over(k.root)]
            starts = [(c, None) for c in starts if c in up]
        else:  # a kernel's root: a cut site's value (its site asked) or a program root
            starts = [(c, self.site_of.get(c) if c in self.inner else None) for c in up
                      if (k.top is None or c == k.top) and (c in self.site_of or c not in self.inner)]
        asked = frozenset({s for _, s in starts if s is not None} | {self.own[x] for x in up if x in self.own})
        self.per[k] = (up, starts, asked, {})
        return self.per[k]

    def _streams_over(self, r: int) -> list:
        """The chosen SoftmaxSum e-nodes that compute the Reduce class r (see ``_streamed``), in the extraction's
        order; their value operand (children[1]) is what that Reduce read by broadcast along the queries. Indexed
        by r once per extraction: each conflict asks for its own reduction."""
        if self.streams is None:
            self.streams = {}
            for c, n in self.chosen.items():
                if n.op == "SoftmaxSum":
                    for red in _streamed(self.view, c):
                        self.streams.setdefault(red, []).append(n)
        return self.streams.get(r, [])

    def holds(self, k, fused: frozenset) -> bool:
        up, starts, asked, answers = self._region(k)
        key = asked & fused
        if key not in answers:
            answers[key] = self._walk(k, up, [(c, frozenset(), k.root is not None) for c, s in starts
                                              if s is None or s not in fused], fused)
        return answers[key]

    def _walk(self, k, up: set, starts: list, fused: frozenset) -> bool:
        view, chosen, mat, own, site_of = self.view, self.chosen, self.mat, self.own, self.site_of
        seen, stack = set(), starts
        while stack:
            x, crossed, edge = stack.pop()
            if (x, crossed, edge) in seen or x not in up:
                continue
            seen.add((x, crossed, edge))
            if edge and x in own and own[x] not in fused:  # its readers read it from memory
                continue
            n = chosen[x]
            if x == k.reduce:
                if n.op == "Reduce" and crossed == k.sites:
                    return True
                continue
            if n.op == "SoftmaxSum":  # streamed: it computes its P V and row sum; like a Reduce, the walk stops
                if crossed == k.sites and k.reduce in _streamed(view, x):
                    return True
                continue
            if n.op in ELEMENTWISE or n.op in MOVEMENT:
                stack.extend((c, crossed, True) for c in n.children)
            elif n.op == "Read" and n.children and n.children[0] in mat and mat[n.children[0]] != x:
                m = n.children[0]
                if m in k.sites:
                    stack.append((mat[m], crossed | {m}, False))
            elif n.op == "View" and n.children and n.children[0] != x and site_of.get(n.children[0]) in k.sites:
                stack.append((n.children[0], crossed | {site_of[n.children[0]]}, False))  # a fused read
            elif n.op == "View" and n.children and not edge and n.children[0] not in site_of:
                if crossed == k.sites and k.reduce in _pieces(view, n.children[0]):
                    return True  # a materialized view (the sibling concatenation): its pieces' reductions
        return False


def _streamed(view, c: int) -> frozenset:
    """The Reduce classes a SoftmaxSum's class c computes in its other spelling (the weighted sum P V and
    the row sum, reached through elementwise nodes: the division by the row sum)."""
    memo = view.__dict__.setdefault("_streamed", {})
    if c not in memo:
        out, seen = set(), set()
        stack = [m for m in view.classes.get(c, ()) if m.op != "SoftmaxSum"]
        while stack:
            m = stack.pop()
            for ch in m.children:
                if ch in seen:
                    continue
                seen.add(ch)
                for e in view.classes.get(ch, ()):
                    if e.op == "Reduce":
                        out.add(ch)
                    elif e.op in ELEMENTWISE:
                        stack.append(e)
        memo[c] = frozenset(out)
    return memo[c]


def _mats(view) -> dict:
    """Mat site class -> the class of the value it materializes."""
    if "_mats" not in view.__dict__:
        view.__dict__["_mats"] = {c: n.children[0] for c, ns in view.classes.items() for n in ns if n.op == "Mat"}
    return view.__dict__["_mats"]


def _own_reads(view) -> dict:
    """Class x holding its own read back, Read(Mat(x)) -> that Mat site class."""
    if "_own" not in view.__dict__:
        mat = _mats(view)
        view.__dict__["_own"] = {c: n.children[0] for c, ns in view.classes.items() for n in ns
                                 if n.op == "Read" and n.children and mat.get(n.children[0]) == c}
    return view.__dict__["_own"]


def _sites_of(view) -> dict:
    """Value class -> the Mat site class that materializes it."""
    if "_site_of" not in view.__dict__:
        view.__dict__["_site_of"] = {z: m for m, z in _mats(view).items()}
    return view.__dict__["_site_of"]


def _pieces(view, y: int) -> set:
    """The classes reached from y through any elementwise or movement node, never through a read
    (rules/fusion.egg piece-of: the pieces of a materialized view, up to their reductions); kept per view."""
    memo = view.__dict__.setdefault("_pieces", {})
    if y in memo:
        return memo[y]
    out, stack = set(), [y]
    while stack:
        x = stack.pop()
        if x in out:
            continue
        out.add(x)
        stack.extend(c for n in view.classes.get(x, ()) if n.op in ELEMENTWISE or n.op in MOVEMENT for c in n.children)
    memo[y] = frozenset(out)
    return memo[y]
