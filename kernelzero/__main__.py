"""`python -m kernelzero` is the `kernelzero` command (torchrun and accelerate launch it so)."""

import sys

from kernelzero.app.cli import main

sys.exit(main())
