"""The verbs of the ``polysat`` command beyond compile/run/demo (cli.py): ``extract`` (with ``--explain``) and ``rules``;
and the programmatic entry points that run the pipeline for other frameworks: the ONNX backend
(``onnx_backend.py``) and the ``torch.compile`` backend (``torch_compile.py``)."""
