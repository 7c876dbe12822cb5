import sys

from scratchpipe_sim.cli import main

sys.exit(main())
