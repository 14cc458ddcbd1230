"""`python -m spamd`: the daemon (same as the `spamd` command)."""

import sys

from spamd.daemon import main

sys.exit(main())
