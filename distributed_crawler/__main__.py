"""`python -m distributed_crawler` = `dcrawl`."""

import sys

from distributed_crawler.cli.main import main

sys.exit(main())
