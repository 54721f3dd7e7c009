"""``python -m simulator.cli``: the ``llmsim`` command."""

import sys

from simulator.cli.main import main

sys.exit(main())
