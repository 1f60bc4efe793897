"""``python -m validation.testbed``: see :mod:`validation.testbed.cli`."""

import sys

from validation.testbed.cli import main

sys.exit(main())
