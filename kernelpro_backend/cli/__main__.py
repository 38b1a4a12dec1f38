"""`python -m kernelpro_backend.cli ...`: the same as the `kernelpro` script."""

from .main import main

raise SystemExit(main())
