"""Pictures of the compilation as standalone SVG (no Graphviz binary): the e-graph, the chosen kernel
partition and the roofline of its kernels (``polysat compile --dump=egraph_svg,regions_svg,roofline``)."""
