"""``python -m specbench.cli``: the ``specbench`` command."""
import sys

from specbench.cli.main import main

sys.exit(main())
