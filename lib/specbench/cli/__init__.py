"""Interfaces: the ``specbench`` command line (``main``: one parser tree; ``plan`` and ``cluster``
are its subcommands), its argument types (``args``), the notebook runner (``notebooks``) and
Slurm submission (``cluster``)."""
