import sys

from gpuloan.cli import main

sys.exit(main())
