"""`python -m svod ...` is the `svod` command."""

import sys

from svod.cli import main

sys.exit(main())
