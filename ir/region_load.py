"""RB-SSA regions read back from their JSON (``--dump=region``, the compiled-model cache): every malformation
is E1109 MalformedStructure at a JSON path (docs/DESIGN.md §RB-SSA). ir/region.py writes the JSON."""
from __future__ import annotations

from typing import Any

from .diagnostics import fail
from .dtypes import DType, parse_dtype
from .expr import Expr
from .region import (BINARY_FNS, MATERIALIZE, UNARY_FNS, Buffer, Layout, Let, MemRef, R, RNode, Region, Yield, binary,
                     broadcast, const, gather, neutral, online_softmax_sum, pred, read, reduce, ref, select, transpose,
                     unary)
from .shapes import Dim, dim
from .trampoline import run


class _Loader:
    """Builds a Region from its JSON; every malformation is E1109 MalformedStructure at a JSON path."""

    def __init__(self, at: str):
        self.at = at

    def bad(self, where: str, why: str):
        fail("MalformedStructure", f"{self.at}: {where}", why, "Regions follow the --dump=region format.")

    def obj(self, x: Any, where: str) -> dict:
        if not isinstance(x, dict):
            self.bad(where, f"expected an object, got {type(x).__name__}")
        return x

    def lst(self, x: Any, where: str) -> list:
        if not isinstance(x, list):
            self.bad(where, f"expected a list, got {type(x).__name__}")
        return x

    def dtype(self, x: Any, where: str, optional: bool = False) -> DType | None:
        if x is None and optional:
            return None
        d = parse_dtype(x)
        if d is None:
            fail("UnknownDtype", f"{self.at}: {where}", f"unknown dtype {x!r}")
        return d

    def expr(self, x: Any, where: str) -> Expr:
        try:
            return Expr.of(x)
        except (ValueError, TypeError) as e:
            fail("NonAffineIndex", f"{self.at}: {where}", str(e))

    def dim(self, x: Any, where: str) -> Dim:
        return dim(self.expr(x, where))

    def number(self, x: Any, where: str) -> Any:
        if isinstance(x, str):
            try:
                return float(x)
            except ValueError:
                self.bad(where, f"{x!r} is not a number")
        if isinstance(x, (int, float)) or x is None:
            return x
        self.bad(where, f"{x!r} is not a number")

    def memref(self, x: Any, where: str) -> MemRef:
        x = self.obj(x, where)
        layout = self.obj(x.get("layout", {"kind": "row_major"}), where + ".layout")
        params = layout.get("params", {})
        return MemRef(tuple(self.dim(d, where + ".shape") for d in self.lst(x.get("shape"), where + ".shape")),
                      self.dtype(x.get("dtype"), where + ".dtype"), int(x.get("alignment", 128)),
                      bool(x.get("noalias", True)),
                      Layout(str(layout.get("kind", "row_major")),
                             tuple(sorted(self.obj(params, where + ".layout.params").items()))))

    def buffer(self, x: Any, where: str, output: bool) -> Buffer:
        x = self.obj(x, where)
        if not isinstance(x.get("name"), str):
            self.bad(where, "a buffer needs a string name")
        mat = x.get("materialize", "gmem") if output else None
        if output and mat not in MATERIALIZE:
            self.bad(where + ".materialize", f"{mat!r} is not one of {MATERIALIZE}")
        return Buffer(x["name"], self.memref(x.get("memref"), where + ".memref"), mat,
                      bool(x.get("program_output", False)) if output else False)

    def node(self, x: Any, where: str) -> RNode:
        return run(self._node(x, where))

    def _node(self, x: Any, where: str):
        """node(x) as a walk (ir/trampoline.py): a region's expression is as deep as the chain it fused."""
        if isinstance(x, str):
            if x not in self.lets:
                self.bad(where, f"reference to {x!r}, which no earlier let defines")
            return ref(x, self.lets[x])
        x = self.obj(x, where)
        if "read" in x:
            r = self.obj(x["read"], where + ".read")
            t = r.get("tensor")
            if t not in self.inputs:
                fail("UnknownTensor", f"{self.at}: {where}", f"read of {t!r}, which is not a region input")
            m = tuple(self.expr(e, where + ".map") for e in self.lst(r.get("map"), where + ".map"))
            return read(t, m, self.inputs[t].dtype, self.axis_names)
        if "gather" in x:
            g = self.obj(x["gather"], where + ".gather")
            t = g.get("tensor")
            if t not in self.inputs:
                fail("UnknownTensor", f"{self.at}: {where}", f"gather from {t!r}, which is not a region input")
            axis = g.get("axis")
            if isinstance(axis, bool) or not isinstance(axis, int):
                self.bad(where + ".gather.axis", f"axis {axis!r} is not an int")
            m = tuple(self.expr(e, where + ".map") for e in self.lst(g.get("map"), where + ".gather.map"))
            index = yield self._node(g.get("index"), where + ".gather.index")
            return gather(t, axis, m, index, self.inputs[t].dtype, self.axis_names)
        if "const" in x:
            return const(self.number(x["const"], where), self.dtype(x.get("dtype", "fp32"), where))
        if "and" in x:
            gs = []
            for k, c in enumerate(self.lst(x["and"], where + ".and")):
                c = self.obj(c, f"{where}.and[{k}]")
                if "ge" in c:
                    a, b = self.lst(c["ge"], f"{where}.and[{k}].ge")
                    gs.append(self.expr(a, where) - self.expr(b, where))
                elif "lt" in c:
                    a, b = self.lst(c["lt"], f"{where}.and[{k}].lt")
                    gs.append(self.expr(b, where) - self.expr(a, where) - 1)
                else:
                    self.bad(f"{where}.and[{k}]", "a constraint is {\"ge\": [a, b]} or {\"lt\": [a, b]}")
            return pred(gs, self.axis_names)
        if "select" in x:
            s = self.obj(x["select"], where + ".select")
            p = yield self._node(s.get("pred"), f"{where}.select.pred")
            a = yield self._node(s.get("then"), f"{where}.select.then")
            b = yield self._node(s.get("else"), f"{where}.select.else")
            return select(p, a, b, self.dtype(x.get("dtype", a.dtype.value if a.dtype else None), where))
        if "reduce" in x:
            r = self.obj(x["reduce"], where + ".reduce")
            body = yield self._node(r.get("body"), where + ".reduce.body")
            axes = [str(a) for a in self.lst(r.get("axes"), where + ".reduce.axes")]
            dt = self.dtype(r.get("dtype"), where + ".reduce.dtype", optional=True)
            init = self.number(r.get("init"), where + ".reduce.init")
            op = str(r.get("op"))
            return reduce(op, axes, body, dt, init if init is not None else neutral(op, dt), self.axis_names)
        if "BroadcastInDim" in x:
            b = self.obj(x["BroadcastInDim"], where + ".BroadcastInDim")
            operand = yield self._node(b.get("operand"), where + ".BroadcastInDim.operand")
            axes = tuple(str(a) for a in self.lst(b.get("result_axes"), where + ".result_axes"))
            shape = tuple(self.dim(d, where) for d in self.lst(b.get("result_shape"), where + ".result_shape"))
            bdims = tuple(self.lst(b.get("broadcast_dimensions", []), where + ".broadcast_dimensions"))
            node = broadcast(operand, axes, shape)
            if bdims != node.arg[2]:  # keep what the file says; the validator judges it
                node = RNode(R.BROADCAST, node.src, (axes, shape, bdims), node.dtype, node.axes)
            return node
        if "online_softmax_sum" in x:
            o = self.obj(x["online_softmax_sum"], where + ".online_softmax_sum")
            sc = yield self._node(o.get("scores"), where + ".online_softmax_sum.scores")
            vs = yield self._node(o.get("values"), where + ".online_softmax_sum.values")
            axes = [str(a) for a in self.lst(o.get("axes"), where + ".online_softmax_sum.axes")]
            p = self.dtype(o.get("p_dtype"), where + ".online_softmax_sum.p_dtype")
            block, passes = o.get("block", 64), o.get("passes", 1)
            for k, val in (("block", block), ("passes", passes)):
                if isinstance(val, bool) or not isinstance(val, int):
                    self.bad(f"{where}.online_softmax_sum.{k}", f"{k} {val!r} is not an int")
            node = online_softmax_sum(axes, sc, vs, p, block, passes, self.axis_names)
            dt = self.dtype(x.get("dtype", "fp32"), where + ".dtype")
            if dt != node.dtype:  # keep what the file says; the validator judges it
                node = RNode(R.ONLINE, node.src, node.arg, dt, node.axes)
            return node
        if "Transpose" in x:
            t = self.obj(x["Transpose"], where + ".Transpose")
            operand = yield self._node(t.get("operand"), where + ".Transpose.operand")
            return transpose(operand, [int(p) for p in self.lst(t.get("permutation"), where + ".permutation")])
        fns = [k for k in x if k != "dtype"]
        if len(fns) == 1 and fns[0] in UNARY_FNS + BINARY_FNS:
            fn = fns[0]
            args = []
            for k, a in enumerate(self.lst(x[fn], f"{where}.{fn}")):
                args.append((yield self._node(a, f"{where}.{fn}[{k}]")))
            want = 1 if fn in UNARY_FNS else 2
            if len(args) != want:
                fail("WrongArity", f"{self.at}: {where}", f"{fn} takes {want} operand(s), got {len(args)}")
            dt = self.dtype(x.get("dtype"), where + ".dtype")
            return unary(fn, args[0], dt) if want == 1 else binary(fn, args[0], args[1], dt)
        self.bad(where, f"unknown expression with keys {sorted(x)}")

    def region(self, doc: Any) -> Region:
        d = self.obj(self.obj(doc, "document").get("region", doc), "region")
        self.at = f"region {d.get('name', '?')}"
        iters = tuple((str(self.obj(a, "iters")["name"]), self.dim(a.get("size", 1), "iters"))
                      for a in self.lst(d.get("iters"), "iters"))
        raxes = tuple((str(self.obj(a, "reduce_axes")["name"]), self.dim(a.get("size", 1), "reduce_axes"))
                      for a in self.lst(d.get("reduce_axes", []), "reduce_axes"))
        self.axis_names = [n for n, _ in iters + raxes]
        inputs = tuple(self.buffer(b, f"inputs[{k}]", False) for k, b in enumerate(self.lst(d.get("inputs"), "inputs")))
        outputs = tuple(self.buffer(b, f"outputs[{k}]", True)
                        for k, b in enumerate(self.lst(d.get("outputs"), "outputs")))
        self.inputs = {b.name: b.memref for b in inputs}
        self.lets: dict = {}
        lets = []
        for k, l in enumerate(self.lst(d.get("lets"), "lets")):
            l = self.obj(l, f"lets[{k}]")
            name = l.get("let")
            if not isinstance(name, str) or name in self.lets:
                self.bad(f"lets[{k}]", f"let name {name!r} is missing or defined twice")
            e = self.node(l.get("expr"), f"lets[{k}].expr")
            self.lets[name] = e
            lets.append(Let(name, e))
        yields = []
        for k, y in enumerate(self.lst(d.get("yield"), "yield")):
            y = self.obj(y, f"yield[{k}]")
            yields.append(Yield(str(y.get("from")), str(y.get("to")), self.dtype(y.get("cast"), f"yield[{k}].cast"),
                                tuple(str(a) for a in self.lst(y.get("axes", [n for n, _ in iters]), f"yield[{k}].axes"))))
        return Region(str(d.get("name", "region")), iters, raxes, inputs, outputs, tuple(lets), tuple(yields),
                      bool(d.get("fp32_pipes", False)))


def region_from_json(doc: Any) -> Region:
    return _Loader("region").region(doc)


def regions_from_json(doc: Any) -> list[Region]:
    if not isinstance(doc, dict) or not isinstance(doc.get("regions"), list):
        fail("MalformedStructure", "regions", "a region dump is {\"regions\": [{\"region\": ...}, ...]}")
    return [region_from_json(r) for r in doc["regions"]]
