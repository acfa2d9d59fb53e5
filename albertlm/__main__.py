import sys

from albertlm.cli import main

sys.exit(main())
