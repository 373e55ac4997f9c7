"""``python -m trtlab.env {discover,repair,setup,load,doctor}`` (standard library only)."""
import sys

from trtlab.env.cli import main

sys.exit(main())
