"""``python -m kzcore.cli ...`` runs `kz` (accelerate launch starts the trainer this way)."""

import sys

from kzcore.cli import main

if __name__ == "__main__":
    sys.exit(main())
