import sys

from scheduler.sim.cli import main

sys.exit(main())
