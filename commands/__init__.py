"""The verbs of the ``polysat`` command beyond compile/run/demo (cli.py): ``extract`` (with ``--explain``) and ``rules``."""
