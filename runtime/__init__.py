"""The whole-model runtime of ``--target cuda`` (docs/DESIGN.md §Runtime): memory arena, constant pool, CUDA
Graph per shape set, compiled-model disk cache and measurement log."""
