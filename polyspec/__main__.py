import sys

from polyspec.cli import main

sys.exit(main())
