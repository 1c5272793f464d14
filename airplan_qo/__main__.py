"""``python -m airplan_qo ...`` (and ``torchrun ... -m airplan_qo ...``): the ``airplan`` CLI."""

import sys

from .cli import main

sys.exit(main())
