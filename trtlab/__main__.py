"""`python -m trtlab <command>` (the commands live in trtlab.cli)."""
import sys

from trtlab.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
