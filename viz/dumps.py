"""The picture dumps of a Compilation: each returns SVG text, written as ``<stage>.svg``."""
from __future__ import annotations


def _names(c):
    from ..ir.user_names import frontend_outputs, node_names, tensor_names
    x = c.extraction
    return node_names(c.program, x.program), tensor_names(c.program, x.program, frontend_outputs(c.frontend))


def _priced(c):
    from ..pricing.kernels import price_kernels
    from ..pricing.symbols import bind_params
    x = c.extraction
    params = bind_params(c.program, None)
    return params, price_kernels(x.program, x.partition, params, c.arch)


def egraph_picture(c) -> str:
    from ..egraph.graph import export
    from .egraph_svg import class_names_of, egraph_svg
    state, _ = c.saturated
    x = c.extraction
    view = export(state)
    return egraph_svg(view, x.chosen, x.roots, class_names_of(state, view),
                      title=f"e-graph of {c.origin} (--cost={c.cost})")


def regions_picture(c) -> str:
    from .regions_svg import regions_svg
    x = c.extraction
    names, tensors = _names(c)
    params, priced = _priced(c)
    return regions_svg(x.program, x.partition, names, tensors, params, priced,
                       title=f"{len(x.partition.kernels)} kernels of {c.origin} (--cost={c.cost}, {c.arch})")


def roofline_picture(c) -> str:
    from ..analyses.devices import device
    from .roofline_svg import roofline_svg
    _, priced = _priced(c)
    return roofline_svg(priced, device(c.arch), title=f"roofline of {c.origin}: {len(priced)} kernels on "
                        f"{device(c.arch).name} (--cost={c.cost})")
