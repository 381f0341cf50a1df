"""The outside corpora the benches and tests run: real architectures built from their libraries' own code
(zoo_models.py) and weight-free ONNX graphs at real sizes (scale_models.py)."""
